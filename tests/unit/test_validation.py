"""Bounded inputs: every limit of rivet.validation refuses with a message naming it."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rivet import validation
from rivet.errors import InvalidInput, PayloadTooLarge
from rivet.validation import (
    build_spec,
    check_key,
    check_name,
    clip_error,
    encode_payload,
    parse_payload,
)


def refused(message: str, exc_type: type[Exception] = InvalidInput):
    return pytest.raises(exc_type, match=re.escape(message))


def spec(**fields):
    return build_spec(**{"queue": "default", "kind": "cf.noop", **fields})


# -- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "billing.invoice", "q_1:high-2", "A" * 100])
def test_names_within_bounds_pass(name: str) -> None:
    assert check_name("queue", name) == name


@pytest.mark.parametrize("value", ["", None, 7])
def test_name_must_be_a_non_empty_string(value) -> None:
    with refused(f"queue must be a non-empty string, got {value!r}"):
        check_name("queue", value)


def test_name_length_is_bounded() -> None:
    with refused("is 101 characters; at most 100"):
        check_name("queue", "q" * 101)


def test_name_length_follows_the_setting(settings) -> None:
    settings.RIVET = {"MAX_NAME_LENGTH": 5}
    assert check_name("kind", "abcde") == "abcde"
    with refused("is 6 characters; at most 5"):
        check_name("kind", "abcdef")


@pytest.mark.parametrize(
    "name", ["bad queue", "-leading", "naïve", "ünïcode", "semi;colon", ".dot", "nul\x00"]
)
def test_name_characters_are_bounded(name: str) -> None:
    with refused(f"kind {name!r} may use only ASCII letters (a-z, A-Z), digits and '_.:-'"):
        check_name("kind", name)


# -- keys ----------------------------------------------------------------------------------


def test_key_may_be_absent() -> None:
    assert check_key("idem_key", None) is None


@pytest.mark.parametrize("value", ["", "line\nbreak", 12])
def test_key_must_be_printable_text(value) -> None:
    with refused(f"idem_key must be a non-empty printable string, got {value!r}"):
        check_key("idem_key", value)


def test_key_length_is_bounded() -> None:
    assert check_key("unique_key", "k" * 200) == "k" * 200
    with refused("unique_key is 201 characters; at most 200"):
        check_key("unique_key", "k" * 201)


# -- payload -------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [{"when": datetime(2026, 1, 1)}, {1, 2}, math.nan])
def test_payload_must_be_json(payload) -> None:
    with refused("payload must be JSON-serialisable"):
        encode_payload(payload)


def test_a_payload_that_contains_itself_is_refused_and_the_next_one_is_not() -> None:
    loop: list = [1]
    loop.append(loop)
    with refused("payload must be JSON-serialisable: Circular reference detected"):
        encode_payload(loop)
    shared = {"a": 1}
    assert encode_payload([shared, shared, loop[:1]]) == '[{"a":1},{"a":1},[1]]'


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6) | st.integers() | st.booleans(), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_the_payload_text_is_the_json_encoders(value) -> None:
    # validation._payload_text calls json's C encoder directly; JSONEncoder.encode is the rule,
    # refusals included (keys of mixed types cannot be sorted: TypeError from both).
    assert _outcome(validation._payload_text, value) == _outcome(
        validation._PAYLOAD_ENCODER.encode, value
    )


def _outcome(encode, value) -> tuple[str, str]:
    try:
        return ("text", encode(value))
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


def _loop() -> dict:
    loop: dict = {"a": 1}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "payload",
    [
        math.nan,
        -math.inf,
        [1.5, math.inf],
        {"when": datetime(2026, 1, 1)},
        {1, 2},
        _loop(),
        {(1, 2): "tuple key"},
        b"bytes",
    ],
)
def test_the_payload_text_refuses_what_the_json_encoder_refuses(payload) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        validation._PAYLOAD_ENCODER.encode(payload)
    with pytest.raises(expected.type, match=f"^{re.escape(str(expected.value))}$"):
        validation._payload_text(payload)


def test_payload_size_is_counted_encoded(settings) -> None:
    settings.RIVET = {"MAX_PAYLOAD_BYTES": 10}
    assert encode_payload("x" * 8) == '"xxxxxxxx"'  # 10 bytes with its quotes: at the limit
    with refused("payload is 11 bytes encoded; the limit is 10 bytes", PayloadTooLarge):
        encode_payload("x" * 9)
    assert encode_payload("é" * 4) == '"éééé"'  # UTF-8: two bytes each, 10 with the quotes
    with refused("payload is 12 bytes encoded; the limit is 10 bytes", PayloadTooLarge):
        encode_payload("é" * 5)


def test_payload_too_large_is_invalid_input() -> None:
    assert issubclass(PayloadTooLarge, InvalidInput)


def test_payload_text_must_parse() -> None:
    assert parse_payload('{"amount": 100}') == {"amount": 100}
    with refused("payload is not valid JSON"):
        parse_payload("{amount: 100}")


# -- build_spec ----------------------------------------------------------------------------


def test_build_spec_fills_defaults(settings) -> None:
    settings.RIVET = {"MAX_ATTEMPTS": 5}
    built = spec(payload={"a": 1}, delay=timedelta(seconds=90))
    assert (built.queue, built.kind, built.payload) == ("default", "cf.noop", {"a": 1})
    assert (built.delay_secs, built.priority, built.max_attempts) == (90.0, 0, 5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"delay": -1}, "delay must be between 0 and 315360000 seconds (ten years), got -1"),
        ({"delay": 1e300}, "delay must be between 0 and 315360000 seconds (ten years)"),
        ({"payload": "\ud800"}, "payload contains a lone surrogate (U+D800"),
        ({"delay": "soon"}, "delay must be a number of seconds, got 'soon'"),
        ({"delay": math.inf}, "delay must be a number of seconds, got inf"),
        ({"delay": True}, "delay must be a number of seconds, got True"),
        ({"run_at": datetime(2026, 1, 1)}, "run_at must be a timezone-aware datetime"),
        ({"run_at": datetime(2026, 1, 1, tzinfo=UTC), "delay": 5}, "give delay or run_at"),
        ({"priority": 101}, "priority must be between -100 and 100, got 101"),
        ({"priority": -101}, "priority must be between -100 and 100, got -101"),
        ({"priority": 1.5}, "priority must be an integer, got 1.5"),
        ({"max_attempts": 0}, "max_attempts must be between 1 and 1000, got 0"),
        ({"max_attempts": 1001}, "max_attempts must be between 1 and 1000, got 1001"),
        ({"max_attempts": True}, "max_attempts must be an integer, got True"),
        ({"queue": "q" * 101}, "queue 'qqqqqqqqqqqqqqqqqqqq'... is 101 characters; at most 100"),
        ({"kind": "no spaces"}, "kind 'no spaces' may use only ASCII letters"),
        ({"idem_key": "k" * 201}, "idem_key is 201 characters; at most 200"),
        ({"unique_key": "tab\there"}, "unique_key must be a non-empty printable string"),
        ({"payload": object}, "payload must be JSON-serialisable"),
    ],
)
def test_build_spec_refuses_out_of_bounds(fields: dict, message: str) -> None:
    with refused(message):
        spec(**fields)


# -- errors --------------------------------------------------------------------------------


def test_clip_error_keeps_the_end(settings) -> None:
    settings.RIVET = {"MAX_ERROR_LENGTH": 20}
    text = "Traceback ... " * 5 + "ValueError: the reason"
    clipped = clip_error(text)
    assert len(clipped) == 20
    assert clipped == "..." + text[-17:]
    assert clip_error("short") == "short"


def test_payload_with_nul_is_refused() -> None:
    with refused("payload contains a NUL character"):
        encode_payload({"text": "a\x00b"})


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"a": "\ud800"}, "payload contains a lone surrogate (U+D800"),
        (["ok", "\udfff"], "payload contains a lone surrogate (U+DFFF"),
        ({"k\udc80": 1}, "payload is not valid UTF-8 (byte 0x80"),
        ({"a": "x\x00y"}, "payload contains a NUL character"),
    ],
)
def test_payload_text_the_database_cannot_store_is_refused(payload, reason: str) -> None:
    with refused(reason):
        encode_payload(payload)


def test_an_escaped_surrogate_pair_in_json_is_one_character() -> None:
    assert encode_payload(json.loads('{"a":"\\ud83d\\ude00"}')) == '{"a":"\U0001f600"}'


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"a":"\\ud800"}', None),  # the escape is parsed, then refused by encode_payload
        ('{"a":"' + b"\xff".decode("utf-8", "surrogateescape") + '"}', "not valid UTF-8"),
    ],
)
def test_cli_payload_text_is_checked(text: str, reason: str | None) -> None:
    if reason is None:
        with refused("lone surrogate (U+D800"):
            encode_payload(parse_payload(text))
    else:
        with refused(f"payload is {reason} (byte 0xff at character 6)"):
            parse_payload(text)
