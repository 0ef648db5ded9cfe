"""Schema fuzzing: schemathesis drives the live host project from the schema it serves.

The host project runs in pytest-django's live server (a real HTTP server on a free port, on
this run's PostgreSQL test database). Schemathesis loads ``rivet/schema/`` from it, as a user
holding every rivet permission, and sends generated requests to every operation; each answer
must be no 5xx and must match the schema (status, content type, body, headers); negative cases
(data the schema forbids) must be refused; wrong or missing credentials must get 401/403.

Not checked: that every schema-valid request is accepted. Some rules are not expressible in
JSON Schema and refuse valid-looking data on purpose: a key reused for other work (422), a
payload over the byte limit (413), a NUL character inside the payload (400).

About 1 000 cases by default with a fixed seed (Hypothesis ``derandomize``), so a run is
repeatable. ``RIVET_FUZZ_CASES=20000`` asks for more (they are spread over the operations);
``RIVET_FUZZ_SEED=random`` draws new cases each run.
"""

from __future__ import annotations

import base64
import os
from collections import Counter
from datetime import timedelta

import pytest
import requests
import schemathesis
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.specs.openapi.checks import positive_data_acceptance

from rivet.models import Schedule
from tests.factories import UserFactory, task_in

pytestmark = [pytest.mark.acceptance, pytest.mark.long, pytest.mark.django_db(transaction=True)]

# tasks: list, enqueue, bulk, get, cancel; queues x3, dead letters x3, metrics; schedules:
# list, get, run, pause, resume
OPERATIONS = 17
CASES = int(os.environ.get("RIVET_FUZZ_CASES", "1000"))
DERANDOMIZE = os.environ.get("RIVET_FUZZ_SEED", "fixed") != "random"
# Given explicitly to each call, so schemathesis's auth check also sends each case without it
# and with wrong credentials, and expects 401/403 then.
AUTH = {"Authorization": "Basic " + base64.b64encode(b"fuzz:pw").decode()}
load_all_checks()
#: ``--checks all``, the negative-data checks among them, but for positive_data_acceptance
#: (see the module's docstring: valid-looking data that is refused on purpose).
CHECKS_RUN = [check for check in CHECKS.get_all() if check is not positive_data_acceptance]
PERMS = [
    "rivet.view_task",
    "rivet.add_task",
    "rivet.requeue_deadletter",
    "rivet.purge_deadletter",
    "rivet.cancel_task",
    "rivet.view_schedule",
    "rivet.change_schedule",
    "rivet.run_schedule",
]


@pytest.fixture
def fuzz_session(live_server) -> requests.Session:
    """A session authenticated as a user with every rivet permission, and some rows to find."""
    UserFactory(username="fuzz", password="pw", permissions=PERMS)
    leased_until = timezone.now() + timedelta(hours=1)  # running: a cancel marks it
    for n in range(5):
        task_in("default", queue="default", dead=True, idem_key=f"fuzz-dead-{n}")
        task_in("default", queue="default", attempts=3, max_attempts=3)
        task_in("default", queue="default", lease_owner="fuzz-worker", visible_at=leased_until)
    Schedule.objects.create(name="fuzz-nightly", kind="noop", cron="0 3 * * *")
    return requests.Session()


def modes(operation) -> list[GenerationMode]:
    """Positive cases always; negative ones where there is an input to get wrong."""
    inputs = (operation.path_parameters, operation.query, operation.headers, operation.body)
    if any(len(group) for group in inputs):
        return [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    return [GenerationMode.POSITIVE]


def fuzz(operation, mode: GenerationMode, examples: int, call) -> None:
    """Run ``examples`` generated cases of one operation through ``call``."""

    @settings(
        max_examples=examples,
        derandomize=DERANDOMIZE,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:
        call(case)

    run()


def test_every_operation_keeps_to_the_schema(live_server, fuzz_session) -> None:
    """Positive and negative cases for each operation; no 5xx, every answer as documented."""
    raw = fuzz_session.get(f"{live_server.url}/rivet/schema/?format=json", headers=AUTH)
    assert raw.status_code == 200, raw.text
    schema = schemathesis.openapi.from_dict(raw.json())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == OPERATIONS, [op.label for op in operations]
    calls: Counter[str] = Counter()
    statuses: Counter[int] = Counter()

    def call(case) -> None:
        # Drop credentials the generator made up for the declared schemes: the user's are given.
        for generated in (case.headers, case.cookies):
            for name in [
                n for n in (generated or {}) if n.lower() in ("authorization", "sessionid")
            ]:
                del generated[name]
        response = case.call_and_validate(
            base_url=live_server.url,
            session=fuzz_session,
            headers=AUTH,
            checks=CHECKS_RUN,
        )
        calls[case.operation.label] += 1
        statuses[response.status_code] += 1

    # An operation with no input has only a handful of distinct requests: run those, then
    # share the rest of the budget among the others, valid and invalid cases alike.
    fixed = [op for op in operations if modes(op) == [GenerationMode.POSITIVE]]
    for operation in fixed:
        fuzz(operation, GenerationMode.POSITIVE, 10, call)
    plan = [(op, mode) for op in operations if op not in fixed for mode in modes(op)]
    per_run = -(-(CASES - sum(calls.values())) // len(plan))  # rounded up
    for operation, mode in plan:
        fuzz(operation, mode, per_run, call)
    total = sum(calls.values())
    print(f"\nschemathesis: {total} cases over {len(calls)} operations; statuses {dict(statuses)}")
    for label, count in sorted(calls.items()):
        print(f"  {count:5d}  {label}")
    assert set(calls) == {op.label for op in operations}
    assert total >= CASES
