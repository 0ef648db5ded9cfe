"""Deprecations fail the suite, in this process and in every child process a test starts."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from tests.processes import child_environ

CATEGORIES = [DeprecationWarning, PendingDeprecationWarning]


@pytest.mark.parametrize("category", CATEGORIES, ids=lambda c: c.__name__)
def test_a_deprecation_in_the_test_process_is_an_error(category):
    with pytest.raises(category, match="old API"):
        warnings.warn("old API", category, stacklevel=1)


@pytest.mark.parametrize("category", CATEGORIES, ids=lambda c: c.__name__)
def test_a_deprecation_in_a_child_process_is_an_error(category):
    code = f"import warnings; warnings.warn('old API', {category.__name__}); print('went on')"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=child_environ("sqlite://:memory:"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert f"{category.__name__}: old API" in result.stderr
    assert "went on" not in result.stdout
