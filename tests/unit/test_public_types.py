"""A user's code type-checks through rivet's public API, and mypy and pyright agree.

The snippet below is a module of a project that uses rivet. Both checkers run on it (mypy with
the repository's configuration and Django plugin, pyright from PyPI, which runs on node); each
must report no error except on the lines marked ``# expect-error``, and exactly those. The
``assert_type`` lines fail if the decorator erased the handler's types (``Any`` is not
``int``) or an API lost its return type.

mypy does not apply a class decorator's return type (a decorated class stays the class to it),
so the class form of ``@rivet.job`` is checked only where the two checkers can agree: calling
``rivet.enqueue`` by the job's name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """\
from datetime import timedelta
from typing import assert_type

import rivet
from rivet.errors import StoreUnavailable


@rivet.job("billing.invoice", max_attempts=5)
def invoice(context: rivet.JobContext) -> int:
    context.check()
    return context.attempt


@rivet.job("mail.welcome")
class Welcome:
    def handle(self, context: rivet.JobContext) -> str:
        return "sent"


def produce(context: rivet.JobContext) -> None:
    assert_type(invoice(context), int)
    made = invoice.enqueue({"order": 1}, idem_key="order-1", delay=timedelta(seconds=5))
    assert_type(made, rivet.EnqueueResult)
    assert_type(made.task_id, int)
    assert_type(rivet.enqueue("mail.welcome", {"user": 1}), rivet.EnqueueResult)
    assert_type(rivet.enqueue_many([("mail.welcome", {"user": 2})]), list[rivet.EnqueueResult])
    assert_type(rivet.get_task(made.task_id), rivet.TaskRecord | None)
    assert_type(rivet.cancel(made.task_id), rivet.CancelOutcome)
    assert_type(rivet.__version__, str)
    try:
        rivet.enqueue("billing.invoice", {"order": 1}, idem_key="order-1")
    except rivet.IdempotencyMismatch as exc:
        assert_type(exc.existing_id, int)
    except StoreUnavailable:
        pass


def misuse(context: rivet.JobContext) -> None:
    invoice("not a context")  # expect-error
    text: str = invoice(context)  # expect-error
    invoice.enqueue({"order": 1}, priorty=5)  # expect-error
    rivet.enqueue("billing.invoice", delay="soon")  # expect-error
    rivet.enqueue_at("billing.invoice")  # expect-error
"""


def expected_lines() -> set[int]:
    return {n for n, line in enumerate(SNIPPET.splitlines(), 1) if "# expect-error" in line}


def mypy_errors(path: Path) -> dict[int, str]:
    env = {**os.environ, "DATABASE_URL": "sqlite://:memory:"}
    env["EFFECT_DATABASE_URL"] = "sqlite://:memory:"
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--no-error-summary", "--show-error-codes",
         # A cache of its own: the shared one remembers user_jobs under an earlier run's path.
         "--cache-dir", str(path.parent / ".mypy_cache"), str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    found = {}
    for line in done.stdout.splitlines():
        match = re.match(rf"{re.escape(str(path))}:(\d+): error: (.*)", line)
        if match:
            found[int(match[1])] = match[2]
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return found


def pyright_command() -> list[str]:
    found = shutil.which("pyright", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(
            "pyright is not installed in this environment: pip install pyright "
            "(it is in the test extra; `make venv` installs it)",
            pytrace=False,
        )
    return [found]


def pyright_errors(path: Path) -> dict[int, str]:
    done = subprocess.run(
        [*pyright_command(), "--outputjson", "--pythonpath", sys.executable, str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads(done.stdout)
    return {
        item["range"]["start"]["line"] + 1: item["message"]
        for item in report["generalDiagnostics"]
        if item["severity"] == "error"
    }


@pytest.fixture(scope="module")
def snippet(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("user_project") / "user_jobs.py"
    path.write_text(SNIPPET)
    return path


def test_mypy_sees_the_handler_types_through_the_decorator(snippet):
    errors = mypy_errors(snippet)
    assert set(errors) == expected_lines(), errors


def test_pyright_sees_the_handler_types_through_the_decorator(snippet):
    errors = pyright_errors(snippet)
    assert set(errors) == expected_lines(), errors


def test_the_class_form_is_typed_after_handle_for_pyright(tmp_path):
    """Where a checker applies class decorators, a job class becomes a typed JobDefinition."""
    path = tmp_path / "class_job.py"
    path.write_text(
        "from typing import assert_type\n"
        "import rivet\n"
        "@rivet.job('mail.welcome')\n"
        "class Welcome:\n"
        "    def handle(self, context: rivet.JobContext) -> str:\n"
        "        return 'sent'\n"
        "def run(context: rivet.JobContext) -> None:\n"
        "    assert_type(Welcome(context), str)\n"
        "    assert_type(Welcome.enqueue({'user': 1}), rivet.EnqueueResult)\n"
    )
    assert pyright_errors(path) == {}
