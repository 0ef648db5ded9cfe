"""The package root: a small public API, imported lazily so `import rivet` needs no Django setup."""

import os
import subprocess
import sys

import pytest

import rivet
from rivet import errors, jobs, values
from rivet import producer as api
from rivet.decisions import failed
from rivet.stores.memory import MemoryStore


@pytest.fixture(autouse=True)
def _kinds(registered_kinds):
    registered_kinds("fake.readback", "mem.readback")


def test_every_name_in_all_resolves_to_its_module_object():
    assert set(rivet.__all__) >= {"enqueue", "enqueue_many", "job", "JobContext", "EnqueueResult"}
    assert rivet.enqueue is api.enqueue
    assert rivet.enqueue_many is api.enqueue_many
    assert rivet.job is jobs.job
    assert rivet.JobContext is jobs.JobContext
    assert rivet.EnqueueResult is values.EnqueueResult
    assert rivet.IdempotencyMismatch is errors.IdempotencyMismatch
    for name in rivet.__all__:
        assert getattr(rivet, name) is not None


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'enqueu'"):
        rivet.enqueu  # noqa: B018


def test_import_rivet_works_before_django_is_set_up():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = "import rivet; print(rivet.__version__); print(sorted(dir(rivet))[0])"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == rivet.__version__


def test_get_task_reads_back_a_task_on_the_memory_store():
    store = MemoryStore()
    made = rivet.enqueue("mem.readback", {"n": 1}, max_attempts=1, using=store)
    record = rivet.get_task(made.task_id, using=store)
    assert isinstance(record, values.TaskRecord)
    assert (record.state, record.attempts, record.max_attempts) == ("pending", 0, 1)
    (claimed,) = store.task_claim(queues=["default"], owner="w", limit=1, lease_ttl=60).claimed
    store.task_settle([failed(claimed, "boom", 0)])
    record = rivet.get_task(made.task_id, using=store)
    assert (record.state, record.attempts, record.payload) == ("dead", 1, {"n": 1})
    assert "boom" in record.last_error and len(record.errors) == 1
    assert rivet.get_task(made.task_id + 1, using=store) is None


@pytest.mark.parametrize("bad", ["1", 1.0, True, None])
def test_get_task_refuses_an_id_that_is_not_an_integer(bad):
    with pytest.raises(errors.InvalidInput, match="task_id must be an integer"):
        rivet.get_task(bad, using=MemoryStore())


def test_get_task_and_cancel_with_the_key_act_only_on_the_task_enqueued_with_it():
    store = MemoryStore()
    keyed = rivet.enqueue("noop", {"n": 1}, idem_key="order-7", using=store)
    plain = rivet.enqueue("noop", {"n": 2}, using=store)
    assert rivet.get_task(keyed.task_id, idem_key="order-7", using=store).payload == {"n": 1}
    assert rivet.get_task(keyed.task_id, idem_key="order-8", using=store) is None
    assert rivet.get_task(plain.task_id, idem_key="order-7", using=store) is None
    assert rivet.get_task(plain.task_id, using=store) is not None  # without the key: as before
    assert rivet.get_task(plain.task_id + 10, idem_key="order-7", using=store) is None
    # cancel with another key changes nothing; with its own it cancels.
    assert rivet.cancel(keyed.task_id, idem_key="order-8", using=store) == (
        values.CancelOutcome.NOT_FOUND
    )
    assert store.task_get(keyed.task_id).state == "pending"
    assert rivet.cancel(keyed.task_id, idem_key="order-7", using=store) == (
        values.CancelOutcome.CANCELLED
    )
    assert store.task_get(keyed.task_id).state == "dead"


@pytest.mark.parametrize("bad", ["", 7, b"order-7"])
def test_get_task_and_cancel_refuse_a_key_that_is_not_a_non_empty_string(bad):
    store = MemoryStore()
    made = rivet.enqueue("noop", using=store)
    for call in (rivet.get_task, rivet.cancel):
        with pytest.raises(errors.InvalidInput, match="idem_key must be the non-empty key"):
            call(made.task_id, idem_key=bad, using=store)


def test_get_task_sees_the_fake_while_one_is_installed():
    import rivet.testing

    with rivet.testing.fake() as queue:
        made = rivet.enqueue("fake.readback", {"n": 1})
        assert rivet.get_task(made.task_id).payload == {"n": 1}
        assert queue.enqueued("fake.readback")[0].id == made.task_id


#: The whole public surface of the package root: the producer API, the job decorator and its
#: context, the values they return, and the errors a caller or a handler handles by name.
PUBLIC_NAMES = {
    "__version__",
    "enqueue",
    "enqueue_many",
    "get_task",
    "cancel",
    "aenqueue",
    "aenqueue_many",
    "aget_task",
    "acancel",
    "job",
    "cron",
    "JobContext",
    "EnqueueResult",
    "TaskRecord",
    "CancelOutcome",
    "RivetError",
    "InvalidInput",
    "IdempotencyMismatch",
    "LeaseLost",
    "Permanent",
}


def test_all_lists_exactly_the_public_names():
    assert set(rivet.__all__) == PUBLIC_NAMES
    assert sorted(rivet.__all__) == sorted(dir(rivet))
    assert len(rivet.__all__) == len(set(rivet.__all__))


@pytest.mark.parametrize("name", ["NotAFake", "EffectUnavailable", "OptionError", "StoreError"])
def test_a_name_outside_the_surface_is_not_reachable_from_the_root(name):
    with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
        getattr(rivet, name)


def test_every_public_error_is_defined_in_rivet_errors():
    public_errors = [
        name
        for name in rivet.__all__
        if isinstance(getattr(rivet, name), type) and issubclass(getattr(rivet, name), Exception)
    ]
    assert set(public_errors) == {
        "RivetError",
        "InvalidInput",
        "IdempotencyMismatch",
        "LeaseLost",
        "Permanent",
    }
    for name in public_errors:
        assert getattr(rivet, name).__module__ == "rivet.errors", name


def test_the_errors_of_the_pieces_around_the_library_live_with_them():
    """The fake's, the effect client's, the failpoints' and the worker options' errors."""
    from effect_project import client as effect_client
    from rivet import failpoints, testing
    from rivet.worker import options

    homes = {
        testing: ["NotAFake"],
        effect_client: ["EffectError", "EffectRejected", "EffectUnavailable"],
        failpoints: ["FailpointConfigError"],
        options: ["OptionError"],
    }
    for module, names in homes.items():
        for name in names:
            error = getattr(module, name)
            assert error.__module__ == module.__name__, name
            assert issubclass(error, errors.RivetError), name
            assert not hasattr(errors, name), f"{name} is still defined in rivet.errors"
    assert issubclass(options.OptionError, errors.RivetConfigError)
    assert issubclass(failpoints.FailpointConfigError, errors.RivetConfigError)


def test_every_error_in_rivet_errors_is_under_rivet_error():
    defined = [
        value
        for value in vars(errors).values()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
    ]
    assert len(defined) >= 10
    for error in defined:
        assert issubclass(error, errors.RivetError), error


def test_a_production_enqueue_never_imports_rivet_testing():
    """A fresh interpreter enqueues on a real (SQLite) store; rivet.testing stays unimported."""
    code = (
        "import sys, django\n"
        "django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('migrate', 'rivet', database='sqlite', verbosity=0)\n"
        "import rivet\n"
        "made = rivet.enqueue('noop', {'n': 1}, using='sqlite')\n"
        "assert rivet.get_task(made.task_id, using='sqlite').state == 'pending'\n"
        "rivet.cancel(made.task_id, using='sqlite')\n"
        "print(sorted(m for m in sys.modules if m.startswith('rivet.testing')))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
