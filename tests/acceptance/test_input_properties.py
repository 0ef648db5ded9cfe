"""Property: whatever JSON-ish payload, name or header arrives, rivet answers cleanly.

Arbitrary text here includes what the database cannot hold (NUL, lone surrogates). For each
input the producer API, ``rivet_enqueue`` and the effect service either accept it, and then it
reads back equal, or refuse it as bad input: never a 5xx, never an unexpected exception.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rivet
from rivet.errors import InvalidInput
from rivet.models import Task

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

# Every code point, surrogates and NUL included.
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | ANY_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(ANY_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)
NAMES = st.one_of(ANY_TEXT, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,20}", fullmatch=True))
PROPERTY = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _number_text(value):
    """JSON values with every number as its exact decimal, as jsonb keeps it."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return Decimal(repr(value)).normalize()
    if isinstance(value, list):
        return [_number_text(item) for item in value]
    return {key: _number_text(item) for key, item in value.items()}


def _same(value, stored) -> bool:
    """Equal as JSON: jsonb reads 7.275389554375334e+16 back as 72753895543753340, the same
    decimal number, which Python's float/int comparison would call different."""
    return _number_text(value) == _number_text(stored)


@PROPERTY
@given(payload=JSONISH, kind=NAMES, queue=NAMES, key=st.none() | ANY_TEXT)
def test_enqueue_accepts_and_reads_back_or_refuses_as_bad_input(payload, kind, queue, key):
    key = None if key is None else f"{key}-{uuid.uuid4().hex}"
    before = Task.objects.count()
    try:
        result = rivet.enqueue(kind, payload, queue=queue, idem_key=key)
    except InvalidInput:
        assert Task.objects.count() == before
        return
    stored = Task.objects.get(id=result.task_id)
    assert (stored.kind, stored.queue, stored.idem_key) == (kind, queue, key)
    assert _same(payload, stored.payload)
    assert _same(payload, rivet.producer.resolve_store(None).task_get(result.task_id).payload)


@settings(PROPERTY, max_examples=40)
@given(payload=JSONISH, kind=NAMES)
def test_rivet_enqueue_prints_a_task_or_exits_2(payload, kind):
    text = json.dumps(payload)  # ensure_ascii: a lone surrogate travels as its \ud800 escape
    out = StringIO()
    before = Task.objects.count()
    try:
        call_command("rivet_enqueue", "--kind", kind, "--payload", text, stdout=out)
    except CommandError as exc:
        assert exc.returncode == 2, exc
        assert Task.objects.count() == before
        return
    word, task_id = out.getvalue().split()
    assert word == "enqueued"
    assert _same(payload, Task.objects.get(id=int(task_id)).payload)


HEADER_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    min_size=1,
    max_size=40,
)


@settings(PROPERTY, max_examples=60)
@given(body=st.dictionaries(ANY_TEXT, JSONISH, max_size=4), key=HEADER_TEXT)
def test_effect_service_never_answers_5xx_and_stores_what_it_accepted(
    effect_service, effect_db, body, key
):
    key = f"{key.strip() or 'k'}-{uuid.uuid4().hex}"
    reply = effect_service.post(key, raw=json.dumps(body).encode())
    assert reply.status < 500, reply.text
    if reply.status == 201:
        stored = effect_db.scalar("SELECT body FROM effects_effect WHERE key = %s", (key,))
        assert _same(body, stored)
    else:
        assert reply.status == 400, reply.text
        assert reply.json["detail"]
        assert effect_db.effects(key) == 0
