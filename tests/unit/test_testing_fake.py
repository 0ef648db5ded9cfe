"""rivet.testing: the fake records enqueues, its assertions fail loudly, run_now runs a job."""

import pytest
from django.core.management import call_command

import rivet
import rivet.testing
from rivet.errors import InvalidInput, RivetError, UnknownJob
from rivet.jobs import registry
from rivet.stores.memory import MemoryStore
from rivet.testing import NotAFake


@pytest.fixture(autouse=True)
def _kinds(registered_kinds):
    registered_kinds(
        "a",
        "b",
        "k",
        "billing.invoice",
        "inner.kind",
        "outer.kind",
        "mail.welcome",
        "mail.goodbye",
        "other",
    )


@pytest.fixture
def real_store():
    return MemoryStore()


@pytest.fixture
def jobs():
    seen = {}

    @rivet.job("fake.echo", queue="echoes", max_attempts=4)
    def echo(context):
        seen["context"] = context
        return {"got": context.payload, "attempt": context.attempt}

    @rivet.job("fake.tuple")
    def returns_tuple(context):
        return (1, 2)

    @rivet.job("fake.opaque")
    def returns_object(context):
        return object()

    def on_failed(context, error):
        seen["failed"] = (context.attempt, str(error))

    @rivet.job("fake.boom", max_attempts=2, failed=on_failed)
    def boom(context):
        raise ValueError("boom")

    yield seen
    for name in ("fake.echo", "fake.tuple", "fake.opaque", "fake.boom"):
        registry.unregister(name)


def test_the_fake_records_instead_of_writing(real_store):
    with rivet.testing.fake() as queue:
        result = rivet.enqueue("mail.welcome", {"user": 7}, using=real_store)
    assert real_store.task_list() == []
    (task,) = queue.enqueued("mail.welcome")
    assert (task.id, task.queue, task.payload) == (result.task_id, "default", {"user": 7})


def test_after_the_block_enqueues_reach_the_store_again(real_store):
    with rivet.testing.fake():
        pass
    rivet.enqueue("k", using=real_store)
    assert len(real_store.task_list()) == 1


def test_assert_enqueued_counts_and_filters():
    with rivet.testing.fake() as queue:
        rivet.enqueue("mail.welcome", {"user": 1})
        rivet.enqueue("mail.welcome", {"user": 2}, queue="mail")
        rivet.enqueue("billing.invoice", {"order": 3})
    assert len(queue.assert_enqueued("mail.welcome")) == 2
    queue.assert_enqueued("mail.welcome", times=2)
    queue.assert_enqueued("mail.welcome", times=1, queue="mail")
    queue.assert_enqueued("mail.welcome", times=1, payload={"user": 1})
    queue.assert_enqueued("billing.invoice", times=1)
    queue.assert_not_enqueued("mail.goodbye")


def test_assert_enqueued_fails_with_what_was_recorded():
    with rivet.testing.fake() as queue:
        rivet.enqueue("mail.welcome", {"user": 1})
    with pytest.raises(AssertionError, match=r"expected 2 task\(s\) of kind 'mail.welcome'"):
        queue.assert_enqueued("mail.welcome", times=2)
    with pytest.raises(AssertionError, match=r"found 0; recorded: mail.welcome@default"):
        queue.assert_enqueued("mail.welcome", payload={"user": 2})
    with pytest.raises(AssertionError, match="queue='mail'"):
        queue.assert_enqueued("mail.welcome", queue="mail")
    with pytest.raises(AssertionError, match="of kind 'billing.invoice'"):
        queue.assert_enqueued("billing.invoice")
    with pytest.raises(AssertionError, match="expected no task of kind 'mail.welcome'"):
        queue.assert_not_enqueued("mail.welcome")
    with pytest.raises(AssertionError, match="expected nothing enqueued"):
        queue.assert_nothing_enqueued()


def test_times_zero_and_a_null_payload_are_real_filters():
    with rivet.testing.fake() as queue:
        rivet.enqueue("k", None)
    queue.assert_enqueued("k", times=1, payload=None)
    queue.assert_enqueued("other", times=0)
    with pytest.raises(AssertionError):
        queue.assert_enqueued("k", payload={})


def test_an_empty_fake_passes_assert_nothing_enqueued():
    with rivet.testing.fake() as queue:
        pass
    queue.assert_nothing_enqueued()
    assert queue.enqueued() == []


def test_a_duplicate_is_one_task_but_two_calls():
    with rivet.testing.fake() as queue:
        first = rivet.enqueue("k", {"n": 1}, idem_key="once")
        again = rivet.enqueue("k", {"n": 1}, idem_key="once")
    assert again.duplicate and again.task_id == first.task_id
    queue.assert_enqueued("k", times=1)
    assert [call.result.duplicate for call in queue.calls] == [False, True]


def test_a_key_mismatch_still_raises_under_the_fake():
    with rivet.testing.fake() as queue:
        rivet.enqueue("k", {"n": 1}, idem_key="once")
        with pytest.raises(rivet.IdempotencyMismatch, match="once"):
            rivet.enqueue("k", {"n": 2}, idem_key="once")
    queue.assert_enqueued("k", times=1)


def test_bad_input_is_refused_under_the_fake_and_not_recorded():
    with rivet.testing.fake() as queue:
        with pytest.raises(InvalidInput):
            rivet.enqueue("bad kind!")
    queue.assert_nothing_enqueued()


def test_enqueue_many_is_recorded():
    with rivet.testing.fake() as queue:
        rivet.enqueue_many([("a", 1), ("b", 2), ("a", 3)])
    queue.assert_enqueued("a", times=2)
    assert len(queue.calls) == 3


def test_module_level_assertions_use_the_innermost_fake():
    with rivet.testing.fake() as outer:
        rivet.enqueue("outer.kind")
        with rivet.testing.fake() as inner:
            rivet.enqueue("inner.kind")
            rivet.testing.assert_enqueued("inner.kind", times=1)
            rivet.testing.assert_not_enqueued("outer.kind")
            assert [t.kind for t in rivet.testing.enqueued()] == ["inner.kind"]
        rivet.testing.assert_enqueued("outer.kind", times=1)
    inner.assert_not_enqueued("outer.kind")
    outer.assert_not_enqueued("inner.kind")


@pytest.mark.parametrize(
    "assertion",
    [
        lambda: rivet.testing.assert_enqueued("k"),
        lambda: rivet.testing.assert_enqueued("k", times=0),
        lambda: rivet.testing.assert_not_enqueued("k"),
        lambda: rivet.testing.assert_nothing_enqueued(),
        lambda: rivet.testing.enqueued("k"),
    ],
    ids=["assert_enqueued", "times_0", "assert_not_enqueued", "nothing", "enqueued"],
)
def test_module_level_assertions_without_a_fake_fail_loudly(assertion):
    assert rivet.testing.active_fake() is None
    with pytest.raises(NotAFake, match="needs an active fake") as caught:
        assertion()
    assert isinstance(caught.value, RivetError) and isinstance(caught.value, AssertionError)


def test_the_enqueue_command_is_recorded_by_the_fake(capsys):
    with rivet.testing.fake() as queue:
        call_command("rivet_enqueue", "--kind", "noop", "--queue", "demo", "--payload", '{"a":1}')
    queue.assert_enqueued("noop", times=1, queue="demo", payload={"a": 1})
    (task,) = queue.enqueued("noop")
    assert capsys.readouterr().out.strip() == f"enqueued {task.id}"


def test_run_now_runs_the_handler_with_a_context(jobs):
    result = rivet.testing.run_now("fake.echo", {"n": 1}, attempt=2, idem_key="e-1")
    assert result == {"got": {"n": 1}, "attempt": 2}
    context = jobs["context"]
    assert (context.kind, context.queue, context.max_attempts, context.idem_key) == (
        "fake.echo",
        "echoes",
        4,
        "e-1",
    )
    assert not context.is_last_attempt and not context.should_stop


def test_run_now_passes_values_through_json(jobs):
    assert rivet.testing.run_now("fake.tuple") == [1, 2]
    with pytest.raises(RivetError, match="return value of job 'fake.opaque'"):
        rivet.testing.run_now("fake.opaque")
    with pytest.raises(RivetError, match="payload must be JSON"):
        rivet.testing.run_now("fake.echo", {"x": object()})


def test_run_now_runs_the_failed_hook_only_on_the_last_attempt(jobs):
    with pytest.raises(ValueError, match="boom"):
        rivet.testing.run_now("fake.boom", attempt=1)
    assert "failed" not in jobs
    with pytest.raises(ValueError, match="boom"):
        rivet.testing.run_now("fake.boom", attempt=2)
    assert jobs["failed"] == (2, "boom")


def test_run_now_refuses_an_unknown_kind():
    with pytest.raises(UnknownJob, match="'fake.nobody'"):
        rivet.testing.run_now("fake.nobody")


@pytest.fixture
def async_jobs():
    import asyncio

    from rivet.jobs import registry

    seen: dict = {}

    async def hook(context, error):
        await asyncio.sleep(0)
        seen["failed"] = (context.attempt, str(error))

    @rivet.job("fake.aecho", max_attempts=2, failed=hook)
    async def aecho(context):
        await asyncio.sleep(0)
        if context.payload == "boom":
            raise ValueError("boom")
        return {"got": context.payload, "attempt": context.attempt}

    yield seen
    registry.unregister("fake.aecho")


def test_run_now_runs_an_async_handler_and_its_async_hook_to_their_end(async_jobs):
    assert rivet.testing.run_now("fake.aecho", (1, 2)) == {"got": [1, 2], "attempt": 1}
    with pytest.raises(ValueError, match="boom"):
        rivet.testing.run_now("fake.aecho", "boom", attempt=2)
    assert async_jobs["failed"] == (2, "boom")


def test_arun_now_awaits_an_async_handler_and_run_now_inside_a_loop_says_to_use_it(async_jobs):
    import asyncio

    async def main():
        result = await rivet.testing.arun_now("fake.aecho", {"n": 1})
        with pytest.raises(RivetError, match="await rivet.testing.arun_now"):
            rivet.testing.run_now("fake.aecho")
        return result

    assert asyncio.run(main()) == {"got": {"n": 1}, "attempt": 1}
