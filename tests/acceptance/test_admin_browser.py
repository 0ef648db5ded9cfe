"""The dead letters in a real browser: an operator requeues one; a reader cannot.

Headless Chromium (Debian's) drives the live server over HTTP: the login form, the action
select, the confirmation page, the messages, the task list. The screenshots it takes are the
ones docs/admin.md shows.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse

import rivet
from rivet.decisions import failed
from rivet.models import Task
from rivet.stores import store_for_alias
from tests.factories import UserFactory

# Fresh id sequences, so that the screenshots show the same small ids on every run.
pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, reset_sequences=True),
]

PASSWORD = "rivet-operator"
DEAD = reverse("admin:rivet_deadletter_changelist")
TASKS = reverse("admin:rivet_task_changelist")
MESSAGES = "ul.messagelist li"


def dead_letter(store, queue, kind, payload, error, idem_key=None):
    """A task that failed its only attempt, through the store as a worker would."""
    task_id = rivet.enqueue(
        kind, payload, queue=queue, idem_key=idem_key, max_attempts=1, using=store
    ).task_id
    (claimed,) = store.task_claim(queues=[queue], owner="vm:4242", limit=1, lease_ttl=60).claimed
    store.task_settle([failed(claimed, error, 0)])
    return task_id


@pytest.fixture
def queues():
    """A small but lifelike queue database: dead, done, ready and delayed tasks in three queues."""
    store = store_for_alias("default")
    dead = {
        "invoice": dead_letter(
            store,
            "billing",
            "effect",
            {"amount": 250, "customer": "c-1042"},
            "ConnectionError: effect service at 127.0.0.1:8081 refused the connection",
            idem_key="invoice-1042",
        ),
        "refund": dead_letter(
            store,
            "billing",
            "effect",
            {"amount": -40, "customer": "c-7"},
            "HTTPError: 503 Service Unavailable",
            idem_key="refund-7",
        ),
        "digest": dead_letter(
            store, "mail", "fail", None, "DemoFailure: the fail kind always fails (attempt 1)"
        ),
    }
    for n in range(3):
        rivet.enqueue("noop", {"n": n}, queue="mail", using=store)
    batch = store.task_claim(queues=["mail"], owner="vm:4242", limit=2, lease_ttl=60).claimed
    for claimed in batch:
        store.task_ack(claimed.lease, {"sent": True})
    rivet.enqueue("noop", {"report": "weekly"}, queue="reports", delay=3600, using=store)
    return dead


def log_in(page, base_url: str, username: str, next_url: str) -> None:
    page.goto(f"{base_url}{reverse('admin:login')}?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base_url}{next_url}")
    # Fold the admin's navigation sidebar, as on a narrow screen: the task list is wide.
    page.click("#toggle-nav-sidebar")


def test_an_operator_requeues_a_dead_letter_and_sees_it_pending(
    live_server, in_browser, screenshot_dir, queues
):
    perms = ["rivet.view_task", "rivet.requeue_deadletter", "rivet.purge_deadletter"]
    operator = UserFactory(username="operator", permissions=perms)
    target, other = queues["invoice"], queues["refund"]

    def steps(page):
        seen = {}
        log_in(page, live_server.url, "operator", DEAD)
        page.screenshot(path=screenshot_dir / "admin-dead-letters.png", full_page=True)
        page.check(f'input[name="_selected_action"][value="{target}"]')
        page.select_option('select[name="action"]', "requeue_selected")
        page.click('button[name="index"]')
        seen["confirm_title"] = page.locator("#content h1").inner_text()
        seen["confirm_note"] = page.locator(".rivet-note").inner_text()
        page.screenshot(path=screenshot_dir / "admin-requeue-confirm.png", full_page=True)
        page.click('input[type=submit][value^="Yes, requeue"]')
        page.wait_for_url(f"{live_server.url}{DEAD}")
        seen["message"] = page.locator(MESSAGES).first.inner_text()
        seen["dead_ids"] = page.locator('input[name="_selected_action"]').evaluate_all(
            "boxes => boxes.map(box => Number(box.value))"
        )
        page.screenshot(path=screenshot_dir / "admin-requeued.png", full_page=True)

        page.goto(f"{live_server.url}{TASKS}")
        page.fill("#searchbar", "invoice-1042")
        page.press("#searchbar", "Enter")
        page.wait_for_url(f"{live_server.url}{TASKS}?q=invoice-1042")
        row = page.locator("#result_list tbody tr").first
        seen["task_state"] = row.locator("td.field-state").inner_text()
        seen["task_id"] = row.locator("th.field-id").inner_text()
        page.goto(f"{live_server.url}{TASKS}")
        page.screenshot(path=screenshot_dir / "admin-tasks.png", full_page=True)
        page.goto(f"{live_server.url}{reverse('admin:rivet_task_change', args=[target])}")
        page.screenshot(path=screenshot_dir / "admin-task.png", full_page=True)

        # The purge confirmation, and going back from it, so nothing is purged.
        page.goto(f"{live_server.url}{DEAD}")
        page.check(f'input[name="_selected_action"][value="{other}"]')
        page.select_option('select[name="action"]', "purge_selected")
        page.click('button[name="index"]')
        seen["purge_note"] = page.locator(".rivet-note").inner_text()
        page.screenshot(path=screenshot_dir / "admin-purge-confirm.png", full_page=True)
        page.click("text=No, take me back")
        page.click("text=Sweep a queue")
        page.screenshot(path=screenshot_dir / "admin-sweep.png", full_page=True)
        return seen

    seen = in_browser(steps)

    assert seen["confirm_title"] == "Requeue 1 dead letter?"
    assert "A replay follows, not a second effect." in seen["confirm_note"]
    assert seen["message"].startswith(f"Requeued 1 dead letter: {target}.")
    assert target not in seen["dead_ids"] and other in seen["dead_ids"]
    assert (seen["task_id"], seen["task_state"]) == (str(target), "pending")
    assert "Purging releases the idempotency keys." in seen["purge_note"]
    task = Task.objects.get(pk=target)
    assert (task.state, task.attempts, task.idem_key) == ("pending", 0, "invoice-1042")
    assert Task.objects.get(pk=other).state == "dead"
    entry = LogEntry.objects.get(object_id=str(target))
    assert (entry.user, entry.action_flag) == (operator, CHANGE)
    for name in ("dead-letters", "requeue-confirm", "requeued", "tasks", "purge-confirm", "sweep"):
        assert (screenshot_dir / f"admin-{name}.png").stat().st_size > 10_000


def test_a_reader_without_the_requeue_permission_cannot_requeue(
    live_server, in_browser, screenshot_dir, queues
):
    UserFactory(username="reader", permissions=["rivet.view_task"])
    target = queues["invoice"]

    def steps(page):
        seen = {}
        log_in(page, live_server.url, "reader", DEAD)
        seen["rows"] = page.locator("#result_list tbody tr").count()
        seen["action_selects"] = page.locator('select[name="action"]').count()
        seen["checkboxes"] = page.locator('input[name="_selected_action"]').count()
        seen["sweep_links"] = page.locator("text=Sweep a queue").count()
        page.screenshot(path=screenshot_dir / "admin-read-only.png", full_page=True)
        # A forged POST of the action, with the reader's session and a valid CSRF token.
        csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
        form = {
            "csrfmiddlewaretoken": csrf,
            "action": "requeue_selected",
            "_selected_action": str(target),
            "confirm": "yes",
        }
        response = page.request.post(f"{live_server.url}{DEAD}", form=form)
        seen["forged_status"] = response.status
        return seen

    seen = in_browser(steps)

    assert seen["rows"] == 3
    assert (seen["action_selects"], seen["checkboxes"], seen["sweep_links"]) == (0, 0, 0)
    assert seen["forged_status"] == 403
    assert Task.objects.get(pk=target).state == "dead"
    assert not LogEntry.objects.exists()


def test_an_operator_edits_a_schedule_and_a_code_schedule_stays_read_only(
    live_server, in_browser, screenshot_dir
):
    from rivet.models import Schedule
    from rivet.schedules.scheduler import sync_code_schedules

    perms = ["rivet.view_schedule", "rivet.add_schedule", "rivet.change_schedule"]
    UserFactory(username="operator", permissions=[*perms, "rivet.run_schedule"])
    made = Schedule.objects.create(
        name="nightly-invoices", kind="noop", cron="0 2 * * *", timezone="Europe/Berlin"
    )
    code = {"name": "cleanup", "kind": "noop", "cron": "*/15 * * * *", "timezone": "UTC"}
    code |= {"queue": None, "priority": None, "payload": {}, "missed": "latest", "max_missed": 100}
    sync_code_schedules([code], alias="default")
    changelist = reverse("admin:rivet_schedule_changelist")
    edit = reverse("admin:rivet_schedule_change", args=[made.pk])
    code_page = reverse(
        "admin:rivet_schedule_change", args=[Schedule.objects.get(name="cleanup").pk]
    )

    def steps(page):
        seen = {}
        log_in(page, live_server.url, "operator", changelist)
        seen["listed"] = page.locator("#result_list tbody th.field-name").all_inner_texts()
        page.screenshot(path=screenshot_dir / "admin-schedules.png", full_page=True)
        page.goto(f"{live_server.url}{edit}")
        page.fill("#id_cron", "30 3 * * 1-5")
        page.select_option("#id_missed", "all")
        page.fill("#id_payload", '{"region": "eu"}')
        page.click('input[name="_save"]')
        page.wait_for_url(f"{live_server.url}{changelist}")
        seen["message"] = page.locator(MESSAGES).first.inner_text()
        row = page.locator("#result_list tbody tr", has_text="nightly-invoices")
        seen["cron"] = row.locator("td.field-cron").inner_text()
        seen["next_run"] = row.locator("td.field-next_run").inner_text()
        page.goto(f"{live_server.url}{code_page}")
        seen["code_cron_inputs"] = page.locator("#id_cron").count()
        seen["code_enabled_inputs"] = page.locator("#id_enabled").count()
        page.screenshot(path=screenshot_dir / "admin-schedule-code.png", full_page=True)
        page.goto(f"{live_server.url}{changelist}")
        page.check(f'input[name="_selected_action"][value="{made.pk}"]')
        page.select_option('select[name="action"]', "pause")
        page.click('button[name="index"]')
        seen["paused"] = page.locator(MESSAGES).first.inner_text()
        return seen

    seen = in_browser(steps)

    assert seen["listed"] == ["cleanup", "nightly-invoices"]
    assert "was changed successfully" in seen["message"]
    assert seen["cron"] == "30 3 * * 1-5"
    assert seen["next_run"].endswith(("03:30:00+01:00", "03:30:00+02:00"))
    assert (seen["code_cron_inputs"], seen["code_enabled_inputs"]) == (0, 1)
    assert seen["paused"] == "1 schedule(s) paused"
    made.refresh_from_db()
    assert (made.cron, made.missed, made.payload, made.enabled) == (
        "30 3 * * 1-5",
        "all",
        {"region": "eu"},
        False,
    )
