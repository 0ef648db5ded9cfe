"""rivet.enqueue and enqueue_many on the memory store: defaults, validation, store choice."""

import weakref
from datetime import UTC, datetime, timedelta

import pytest

import rivet
from rivet import producer as api
from rivet.errors import (
    BatchKeyClash,
    IdempotencyMismatch,
    InvalidInput,
    PayloadTooLarge,
    UnknownKind,
)
from rivet.jobs import registry
from rivet.stores.memory import FakeClock, MemoryStore
from rivet.values import EnqueueResult


@pytest.fixture(autouse=True)
def _kinds(registered_kinds):
    registered_kinds("a", "b", "c", "k", "fresh")


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store(clock):
    return MemoryStore(clock=clock)


@pytest.fixture
def register():
    names = []

    def _register(name, **options):
        names.append(name)
        return rivet.job(name, **options)(lambda context: None)

    yield _register
    for name in names:
        registry.unregister(name)


def only_task(store):
    (task,) = store.task_list()
    return task


def test_an_unregistered_kind_is_refused_naming_the_kind_and_the_setting(store):
    with pytest.raises(UnknownKind) as raised:
        rivet.enqueue("nobody.registered.this", {"a": 1}, using=store)
    message = str(raised.value)
    assert message.startswith("unknown job kind 'nobody.registered.this': no installed app")
    assert "@rivet.job('nobody.registered.this')" in message
    assert "RIVET['ALLOW_UNKNOWN_KINDS'] = True" in message
    assert (raised.value.code, raised.value.field) == ("unknown_kind", "kind")
    with pytest.raises(UnknownKind):
        rivet.enqueue_many([("k", 1), ("nobody.registered.this", 2)], using=store)
    assert store.task_list() == []


def test_a_malformed_kind_is_a_bad_name_before_it_is_an_unknown_one(store):
    with pytest.raises(InvalidInput) as raised:
        rivet.enqueue("no such kind!", using=store)
    assert raised.value.code == "invalid_name"


def test_an_unregistered_kind_takes_the_settings_defaults_when_allowed(store, settings):
    settings.RIVET = {"QUEUE": "fallback", "MAX_ATTEMPTS": 7, "ALLOW_UNKNOWN_KINDS": True}
    result = rivet.enqueue("nobody.registered.this", {"a": 1}, using=store)
    task = store.task_get(result.task_id)
    assert (task.kind, task.queue, task.max_attempts, task.priority) == (
        "nobody.registered.this",
        "fallback",
        7,
        0,
    )
    assert task.payload == {"a": 1}
    assert result == EnqueueResult(task_id=task.id, duplicate=False)


def test_a_registered_job_supplies_queue_attempts_and_priority(store, register):
    register("api.test.mail", queue="mail", max_attempts=9, priority=5)
    rivet.enqueue("api.test.mail", using=store)
    task = only_task(store)
    assert (task.queue, task.max_attempts, task.priority) == ("mail", 9, 5)


def test_explicit_options_win_over_the_job_even_when_zero(store, register):
    register("api.test.report", queue="reports", max_attempts=9, priority=5)
    rivet.enqueue("api.test.report", queue="urgent", max_attempts=1, priority=0, using=store)
    task = only_task(store)
    assert (task.queue, task.max_attempts, task.priority) == ("urgent", 1, 0)


def test_the_job_handle_enqueues_through_the_api(store, register):
    definition = register("api.test.handle", queue="handles")
    result = definition.enqueue({"n": 1}, using=store)
    assert store.task_get(result.task_id).queue == "handles"


def test_delay_sets_visible_at_from_the_store_clock(store, clock):
    rivet.enqueue("k", delay=30, using=store)
    rivet.enqueue("k", delay=timedelta(minutes=2), using=store)
    first, second = store.task_list()
    assert first.visible_at == clock.now + timedelta(seconds=30)
    assert second.visible_at == clock.now + timedelta(minutes=2)


def test_run_at_sets_visible_at(store):
    when = datetime(2030, 5, 1, 12, 0, tzinfo=UTC)
    rivet.enqueue("k", run_at=when, using=store)
    assert only_task(store).visible_at == when


@pytest.mark.parametrize(
    "options",
    [
        {"queue": "has space"},
        {"queue": ""},
        {"priority": 101},
        {"priority": "high"},
        {"max_attempts": 0},
        {"delay": -1},
        {"run_at": datetime(2030, 1, 1)},
        {"idem_key": ""},
        {"delay": 5, "run_at": datetime(2030, 1, 1, tzinfo=UTC)},
    ],
    ids=lambda options: ",".join(options),
)
def test_bad_input_raises_and_writes_nothing(store, options):
    with pytest.raises(InvalidInput):
        rivet.enqueue("k", {"ok": True}, using=store, **options)
    assert store.task_list() == []


def test_a_bad_kind_and_a_non_json_payload_are_refused(store):
    with pytest.raises(InvalidInput, match="kind"):
        rivet.enqueue("bad kind!", using=store)
    with pytest.raises(InvalidInput, match="JSON"):
        rivet.enqueue("k", {"when": datetime.now(UTC)}, using=store)
    assert store.task_list() == []


def test_an_oversized_payload_is_refused(store, settings):
    settings.RIVET = {"MAX_PAYLOAD_BYTES": 64}
    with pytest.raises(PayloadTooLarge, match="64"):
        rivet.enqueue("k", {"blob": "x" * 100}, using=store)
    assert store.task_list() == []


def test_a_key_used_before_for_the_same_work_is_a_duplicate(store):
    first = rivet.enqueue("k", {"n": 1}, idem_key="pay-1", using=store)
    again = rivet.enqueue("k", {"n": 1}, idem_key="pay-1", using=store)
    assert again == EnqueueResult(task_id=first.task_id, duplicate=True)
    assert len(store.task_list()) == 1


def test_a_key_reused_for_other_work_names_the_key(store):
    rivet.enqueue("k", {"n": 1}, idem_key="pay-1", using=store)
    with pytest.raises(IdempotencyMismatch, match="pay-1"):
        rivet.enqueue("k", {"n": 2}, idem_key="pay-1", using=store)
    assert len(store.task_list()) == 1


def test_using_an_alias_asks_the_store_factory(monkeypatch, store):
    asked = []
    monkeypatch.setattr("rivet.stores.store_for_alias", lambda alias: asked.append(alias) or store)
    rivet.enqueue("k", using="replica")
    assert asked == ["replica"]
    assert len(store.task_list()) == 1


def test_using_none_takes_the_configured_store(monkeypatch, store):
    monkeypatch.setattr("rivet.stores._configured_store", lambda *settings: store)
    rivet.enqueue("k")
    assert len(store.task_list()) == 1


def test_using_something_else_is_refused():
    with pytest.raises(InvalidInput, match="alias or a rivet Store"):
        rivet.enqueue("k", using=42)


def test_enqueue_many_takes_dicts_and_tuples_in_order(store):
    results = rivet.enqueue_many(
        [("a", {"n": 1}), {"kind": "b", "queue": "other", "priority": 3}, ("c",)], using=store
    )
    tasks = [store.task_get(r.task_id) for r in results]
    assert [(t.kind, t.queue, t.priority) for t in tasks] == [
        ("a", "default", 0),
        ("b", "other", 3),
        ("c", "default", 0),
    ]


def test_enqueue_many_validates_every_item_before_writing(store):
    with pytest.raises(InvalidInput, match="item 1"):
        rivet.enqueue_many([("a", 1), {"kind": "b", "colour": "red"}], using=store)
    with pytest.raises(InvalidInput, match="item 0: 'kind' is required"):
        rivet.enqueue_many([{"payload": 1}], using=store)
    with pytest.raises(InvalidInput, match="item 0"):
        rivet.enqueue_many(["just-a-string"], using=store)
    with pytest.raises(InvalidInput, match="^item 1: priority must be between") as refused:
        rivet.enqueue_many([("a", 1), {"kind": "b", "priority": 500}], using=store)
    assert refused.value.field == "priority"
    with pytest.raises(UnknownKind, match="^item 2: unknown job kind 'nobody'"):
        rivet.enqueue_many([("a", 1), ("b", 2), ("nobody", 3)], using=store)
    assert store.task_list() == []


def test_enqueue_many_is_all_or_nothing_on_a_key_mismatch(store):
    rivet.enqueue("a", 1, idem_key="taken", using=store)
    with pytest.raises(IdempotencyMismatch):
        rivet.enqueue_many(
            [("fresh", 1), {"kind": "a", "payload": 2, "idem_key": "taken"}], using=store
        )
    assert [t.kind for t in store.task_list()] == ["a"]


def test_enqueue_many_refuses_one_key_for_two_works_in_the_batch(store):
    with pytest.raises(BatchKeyClash, match="item 2: idem_key 'k' is also the key of item 0"):
        rivet.enqueue_many(
            [
                {"kind": "a", "payload": 1, "idem_key": "k"},
                ("b", 1),
                {"kind": "a", "payload": 2, "idem_key": "k"},
            ],
            using=store,
        )
    assert store.task_list() == []


@pytest.mark.parametrize("key", ["café-8503", "tab\there", " lead", "trail ", "nul\x00", 7])
def test_an_idempotency_key_is_visible_ascii(store, key):
    with pytest.raises(InvalidInput, match="idem_key") as refused:
        rivet.enqueue("k", using=store, idem_key=key)
    assert refused.value.code == "idempotency_key_invalid"
    assert store.task_list() == []
    assert rivet.enqueue("k", using=store, idem_key="an ASCII key: ~!").duplicate is False


def test_enqueue_many_of_nothing_writes_nothing(store):
    assert rivet.enqueue_many([], using=store) == []


def test_task_spec_is_what_enqueue_would_store(register):
    register("api.test.spec", queue="q1", max_attempts=4)
    spec = api.task_spec("api.test.spec", {"x": 1}, idem_key="k-1")
    assert (spec.queue, spec.max_attempts, spec.idem_key, spec.payload) == (
        "q1",
        4,
        "k-1",
        {"x": 1},
    )


def test_the_job_handle_refuses_an_option_enqueue_does_not_know(store, register):
    definition = register("api.test.typo")
    # rivet.enqueue's keywords, spelled out: a type checker refuses the typo before Python does.
    with pytest.raises(TypeError, match="unexpected keyword argument 'queu'"):
        definition.enqueue({"n": 1}, using=store, queu="mail")  # type: ignore[call-arg]
    assert store.task_list() == []


def test_a_batch_validates_each_item_once_and_only_as_far_as_it_is_read(monkeypatch):
    read = []
    validate = api._item_spec

    def counted(index, item, limits, trace_context):
        read.append(index)
        return validate(index, item, limits, trace_context)

    monkeypatch.setattr(api, "_item_spec", counted)
    items = [("a", n) for n in range(5)] + ["not an item"]
    batch = api.SpecBatch(items, api.Limits.read(), None, one_database=False)
    assert len(batch) == 6 and read == []
    assert batch[2].payload == 2 and read == [0, 1, 2]
    assert [spec.payload for spec in batch[1:4]] == [1, 2, 3] and read == [0, 1, 2, 3]
    with pytest.raises(InvalidInput, match="^item 5: expected a dict or a"):
        list(batch)
    assert read == [0, 1, 2, 3, 4, 5]  # items 0 to 4 were not validated again
    assert batch[-2].payload == 4
    with pytest.raises(IndexError):
        batch[6]


def test_iterating_a_batch_keeps_no_task_spec_behind_it():
    # A streamed batch of thousands must leave nothing for the garbage collector to walk.
    items = [{"kind": "a", "payload": {"n": n}, "idem_key": f"k{n % 3}"} for n in range(3)]
    items += [{"kind": "a", "payload": {"n": n}} for n in range(3, 50)]
    batch = api.SpecBatch(items, api.Limits.read(), None, one_database=True)
    first = batch.first()  # what enqueue_many reads first, and keeps
    seen = [weakref.ref(spec) for spec in batch]
    assert seen[0]() is first
    assert [ref for ref in seen[1:] if ref() is not None] == []
    again = batch[7]  # iterated past, then indexed: validated again, equal
    assert again == api.task_spec("a", {"n": 7}) and batch[7] is again


def test_an_item_refused_by_a_check_is_refused_again_when_read_again():
    items = [
        {"kind": "a", "payload": 1, "idem_key": "k"},
        {"kind": "b", "payload": 1, "idem_key": "k"},
    ]
    batch = api.SpecBatch(items, api.Limits.read(), None, one_database=False)
    for read in (list, list, lambda batch: batch[1]):
        with pytest.raises(BatchKeyClash, match="^item 1: idem_key 'k' is also the key of item 0"):
            read(batch)


def test_a_key_clash_names_the_later_item_whichever_way_the_batch_is_read():
    items = [
        {"kind": "a", "payload": 1, "idem_key": "k"},
        {"kind": "a", "payload": 1, "idem_key": "k"},  # the same work: a duplicate, allowed
        {"kind": "b", "payload": 1, "idem_key": "k"},
    ]
    for read in (list, lambda batch: batch[2]):
        batch = api.SpecBatch(items, api.Limits.read(), None, one_database=False)
        with pytest.raises(BatchKeyClash, match="^item 2: idem_key 'k' is also the key of item 0"):
            read(batch)


def nested_list(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [101, 5000])
def test_a_payload_nested_past_the_limit_is_invalid_input_and_writes_nothing(store, depth):
    """5000 levels is past the recursion limit: the encoder's RecursionError, refused alike."""
    with pytest.raises(InvalidInput) as raised:
        rivet.enqueue("a", {"tree": nested_list(depth - 1)}, using=store)
    assert raised.value.field == "payload"
    assert "at most 100 levels (rivet.text.MAX_JSON_DEPTH)" in str(raised.value)
    with pytest.raises(InvalidInput):
        rivet.enqueue_many([("a", 1), ("b", nested_list(depth))], using=store)
    assert store.task_list() == []


def test_a_payload_nested_100_levels_is_taken(store):
    rivet.enqueue("a", nested_list(100), using=store)
    assert only_task(store).payload == nested_list(100)
