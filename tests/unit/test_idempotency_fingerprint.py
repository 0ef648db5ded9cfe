"""The request fingerprint that decides "same request" for a reused Idempotency-Key."""

from rivet.idempotency.fingerprint import canonical_json, request_fingerprint


def test_key_order_and_whitespace_do_not_change_the_fingerprint():
    assert (
        canonical_json({"b": [1, {"y": 2, "x": 1}], "a": "é"}) == '{"a":"é","b":[1,{"x":1,"y":2}]}'
    )
    assert request_fingerprint("post", "/effects", {"a": 1, "b": 2}) == request_fingerprint(
        "POST", "/effects", {"b": 2, "a": 1}
    )


def test_method_path_and_body_each_change_the_fingerprint():
    base = request_fingerprint("POST", "/effects", {"amount": 1})
    assert (
        len(
            {
                base,
                request_fingerprint("PUT", "/effects", {"amount": 1}),
                request_fingerprint("POST", "/other", {"amount": 1}),
                request_fingerprint("POST", "/effects", {"amount": 2}),
                request_fingerprint("POST", "/effects", {"amount": 1.0}),
            }
        )
        == 5
    )
