"""The system checks know the API's and the metrics' RIVET keys, and refuse bad values."""

from __future__ import annotations

import pytest

from rivet.checks import check_rivet_settings


def ids(settings, **rivet) -> list[str]:
    settings.RIVET = rivet
    return [error.id for error in check_rivet_settings()]


def test_the_api_and_metrics_keys_are_known(settings) -> None:
    assert ids(settings, API_BULK_MAX=50, METRICS_TOKEN="t" * 32) == []


@pytest.mark.parametrize("token", ["short", 12345, ""])
def test_a_weak_or_odd_metrics_token_is_refused(settings, token) -> None:
    assert ids(settings, METRICS_TOKEN=token) == ["rivet.E005"]


@pytest.mark.parametrize("limit", [0, -1, "many"])
def test_the_bulk_limit_must_be_positive(settings, limit) -> None:
    assert ids(settings, API_BULK_MAX=limit) == ["rivet.E002"]
