"""Which Tasks API RivetBackend stands on: Django's own on Django 6, the backport on Django 5.2.

Each matrix cell runs the test for its Django and skips the other with a reason naming the cell
it belongs to, so a cell that installed the wrong Django or the wrong package fails here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import django
import pytest

from rivet.backends import (
    InvalidTask,
    RivetBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
)
from rivet.errors import RivetConfigError

ROOT = Path(__file__).resolve().parents[2]
DJANGO = django.get_version()
ON_DJANGO_6 = django.VERSION >= (6, 0)


def django_tasks_distribution() -> str | None:
    try:
        return importlib.metadata.version("django-tasks")
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.skipif(
    not ON_DJANGO_6, reason=f"for the Django 6.0/6.1 cells; this one has Django {DJANGO}"
)
def test_django6_cells_use_the_built_in_django_tasks_and_have_no_backport():
    from django.tasks import exceptions, signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskResultStatus as BuiltInStatus

    assert RivetBackend.__bases__ == (BaseTaskBackend,)
    assert BaseTaskBackend.__module__ == "django.tasks.backends.base"
    assert (InvalidTask, TaskResultDoesNotExist, TaskResultMismatch) == (
        exceptions.InvalidTask,
        exceptions.TaskResultDoesNotExist,
        exceptions.TaskResultMismatch,
    )
    assert TaskResultStatus is BuiltInStatus
    import rivet.backends

    assert rivet.backends.task_enqueued is signals.task_enqueued
    # The conditional dependency left the backport out of this virtualenv altogether.
    assert importlib.util.find_spec("django_tasks") is None
    assert django_tasks_distribution() is None
    assert "django_tasks" not in sys.modules


@pytest.mark.skipif(ON_DJANGO_6, reason=f"for the Django 5.2 cell; this one has Django {DJANGO}")
def test_django52_cell_uses_the_django_tasks_backport():
    from django_tasks import exceptions
    from django_tasks.backends.base import BaseTaskBackend

    assert RivetBackend.__bases__ == (BaseTaskBackend,)
    assert BaseTaskBackend.__module__ == "django_tasks.backends.base"
    assert InvalidTask is exceptions.InvalidTaskError
    assert TaskResultDoesNotExist is exceptions.TaskResultDoesNotExist
    assert django_tasks_distribution() is not None
    # Django 5.2 has no django.tasks of its own to fall back on.
    assert importlib.util.find_spec("django.tasks") is None


def test_the_backport_is_a_dependency_only_where_django_6_cannot_run():
    requirements = importlib.metadata.requires("django-rivet") or []
    (backport,) = [r for r in requirements if r.startswith("django-tasks")]
    assert backport.replace('"', "'").endswith("; python_version < '3.12'"), backport


@pytest.mark.skipif(
    ON_DJANGO_6, reason=f"for the Django 5.2 cell: Django {DJANGO} has django.tasks built in"
)
def test_without_the_backport_on_django52_the_backend_import_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "django_tasks", None)  # makes `import django_tasks` fail
    monkeypatch.delitem(sys.modules, "rivet.backends")
    with pytest.raises(RivetConfigError, match=r"pip install 'django-tasks>=0\.12'") as caught:
        importlib.import_module("rivet.backends")
    assert f"Django {DJANGO} has none" in str(caught.value)
    assert "rivet.backends" not in sys.modules


SETUP_WITHOUT_BACKPORT = """\
import sys
sys.modules["django_tasks"] = None  # as if the backport were not installed
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "rivet"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
    TASKS=TASKS,
)
django.setup()
print("rivet is ready")
"""


def setup_without_backport(tasks: dict) -> subprocess.CompletedProcess:
    code = SETUP_WITHOUT_BACKPORT.replace("TASKS=TASKS", f"TASKS={tasks!r}")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(
    ON_DJANGO_6, reason=f"for the Django 5.2 cell: Django {DJANGO} has django.tasks built in"
)
def test_without_the_backport_rivet_starts_unless_tasks_names_its_backend():
    plain = setup_without_backport({})
    assert plain.returncode == 0, plain.stderr
    assert "rivet is ready" in plain.stdout

    named = setup_without_backport({"default": {"BACKEND": "rivet.backends.RivetBackend"}})
    assert named.returncode != 0
    assert "RivetConfigError" in named.stderr
    assert "pip install 'django-tasks>=0.12'" in named.stderr
