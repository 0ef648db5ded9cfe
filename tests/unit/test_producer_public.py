"""The package root: a small public API, imported lazily so `import rivet` needs no Django setup."""

import os
import subprocess
import sys

import pytest

import rivet
from rivet import errors, jobs, values
from rivet import producer as api


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
