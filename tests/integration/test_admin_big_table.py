"""The admin changelists on 1 000 000 task rows in PostgreSQL: few queries, no full COUNT(*).

Cost: loading the rows takes a few seconds (one INSERT ... SELECT generate_series); the rows
vanish with the test's transaction. Deselect with ``-m "not bigtable"``. Timings are printed
(run with ``-s``), never asserted; the assertions are on the queries each page runs.
"""

from __future__ import annotations

import re
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from bench.bigclaim import bulk_load
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.bigtable]

ROWS = 1_000_000

# 8 kinds, 3 queues (60/30/10 %), 97 % done, 2 % pending, 1 % dead; one task every 10 s
# for ~115 days; every tenth task has an idempotency key.
LOAD = """
INSERT INTO rivet_task (
    queue, kind, payload, idem_key, state, attempts, max_attempts, lease_epoch, lease_owner,
    visible_at, priority, created_at, updated_at, last_error, result
)
SELECT
    CASE WHEN (i + i / 100) %% 10 < 6 THEN 'default'
        WHEN (i + i / 100) %% 10 < 9 THEN 'mail' ELSE 'sms' END,
    'kind-' || (i %% 8),
    jsonb_build_object('n', i),
    CASE WHEN i %% 10 = 0 THEN 'key-' || i END,
    CASE WHEN i %% 100 = 0 THEN 'dead' WHEN i %% 100 IN (1, 2) THEN 'pending' ELSE 'done' END,
    CASE WHEN i %% 100 = 0 THEN 3 ELSE 1 END,
    3,
    CASE WHEN i %% 100 = 0 THEN 3 ELSE 1 END,
    CASE WHEN i %% 100 = 1 THEN 'worker-' || (i %% 4) END,
    CASE WHEN i %% 100 = 1 THEN now() + interval '30 seconds' ELSE stamp END,
    0,
    stamp,
    stamp + interval '2 seconds',
    CASE WHEN i %% 100 = 0 THEN 'boom; max attempts exceeded (handler error)' ELSE '' END,
    CASE WHEN i %% 100 > 2 THEN '{"ok": true}'::jsonb END
FROM generate_series(1, %s) AS i,
    LATERAL (SELECT now() - make_interval(secs => (%s - i) * 10.0)) AS at (stamp)
"""

FULL_COUNT = re.compile(r'^SELECT COUNT\(\*\) AS "__count" FROM "rivet_task"', re.IGNORECASE)


# Every index of the table: dropped for the load and built again after it (a sorted build is
# much faster than a million inserts into each). The test's rollback restores them anyway.
@pytest.fixture
def million_tasks():
    """1 000 000 rows in this test's transaction: no WAL (unlogged), indexes built after."""
    load, index = bulk_load(LOAD, [ROWS, ROWS])
    print(f"\nloaded {ROWS} task rows in {load:.1f}s, indexed and analyzed in {index:.1f}s")


#: The queries one changelist may take: the page's own, and the queue overview's, which asks the
#: planner once for each queue past DONE_COUNT_LIMIT done tasks (three queues here).
MAX_QUERIES = 18


def open_page(client, label, url, params=None, max_queries=MAX_QUERIES):
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.get(url, params or {})
        elapsed = time.perf_counter() - started
    assert response.status_code == 200, label
    sql = [query["sql"] for query in queries.captured_queries]
    full_counts = [text for text in sql if FULL_COUNT.match(text)]
    assert not full_counts, f"{label}: a full COUNT(*) of the table: {full_counts}"
    assert len(sql) <= max_queries, f"{label}: {len(sql)} queries:\n" + "\n".join(sql)
    cl = response.context["cl"]
    plan = result_list_plan(queries.captured_queries)
    print(
        f"{label:<34} {elapsed * 1000:7.1f} ms  {len(sql):2d} queries  "
        f"{'about ' if cl.paginator.estimated else ''}{cl.result_count} rows\n"
        + "".join(f"    {line}\n" for line in plan[:6])
    )
    assert not any("Seq Scan on rivet_task" in line for line in plan), f"{label}: {plan}"
    return response


def result_list_plan(captured) -> list[str]:
    """EXPLAIN of the query that read the page's rows (the one that selects the payload)."""
    (query,) = [q["sql"] for q in captured if '"rivet_task"."payload"' in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {query}")
        return [row[0] for row in cursor.fetchall()]


def test_changelists_stay_cheap_on_a_million_tasks(client, million_tasks):
    perms = ["rivet.view_task", "rivet.requeue_deadletter", "rivet.purge_deadletter"]
    client.force_login(UserFactory(permissions=perms))
    tasks, dead = (
        reverse("admin:rivet_task_changelist"),
        reverse("admin:rivet_deadletter_changelist"),
    )

    page = open_page(client, "tasks", tasks)
    cl = page.context["cl"]
    assert cl.paginator.estimated and 500_000 < cl.result_count < 2_000_000
    assert len(cl.result_list) == cl.list_per_page
    overview = {row.queue: row for row in page.context["queue_overview"]}
    assert sorted(overview) == ["default", "mail", "sms"]
    assert overview["sms"].dead > 0 and overview["mail"].done_estimated
    assert overview["mail"].done > 10_000 and overview["mail"].done_text.startswith("~")
    kinds = {spec.title: spec for spec in cl.filter_specs}["kind"].lookup_choices
    assert len(kinds) == 8

    page = open_page(client, "tasks, state=dead", tasks, {"state__exact": "dead"})
    assert page.context["cl"].result_count == 10_000 and not page.context["cl"].paginator.estimated
    page = open_page(client, "tasks, kind=kind-3", tasks, {"kind": "kind-3"})
    assert {task.kind for task in page.context["cl"].result_list} == {"kind-3"}
    page = open_page(
        client,
        "tasks, queue=sms, state=pending",
        tasks,
        {"queue": "sms", "state__exact": "pending"},
    )
    assert {task.state for task in page.context["cl"].result_list} == {"pending"}
    page = open_page(client, "tasks, search idempotency key", tasks, {"q": "key-500000"})
    assert [task.idem_key for task in page.context["cl"].result_list] == ["key-500000"]
    newest = page.context["cl"].result_list[0].created_at
    params = {"created_at__year": newest.year, "created_at__month": newest.month}
    page = open_page(client, "tasks, one month", tasks, params)
    assert page.context["cl"].result_count > 0

    page = open_page(client, "dead letters", dead)
    assert page.context["cl"].result_count == 10_000
    assert {task.state for task in page.context["cl"].result_list} == {"dead"}
    open_page(client, "dead letters, queue=mail", dead, {"queue": "mail"})
