"""docs/get-started.md's new-project path, pasted top to bottom into a new project.

The blocks between the page's ``<!-- new-project -->`` markers (README.md's "Use it in your
project" included where the site includes it) run as written, in order, in an empty folder
with a fresh virtualenv that has the built wheel and nothing of this repository: ``pip
install`` lines name extras the virtualenv has, ``django-admin startproject`` makes the project,
``python manage.py`` lines run in it, a ``# path`` block is appended to that file and a
``# python manage.py shell`` block runs in its shell. The project keeps Django's default SQLite
database, as the page says. A line the test cannot run as written fails it: the page's
new-project path must not need the repository (``make``, the demo kinds).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.acceptance.adopter_kit import (
    REPO,
    Block,
    Project,
    clean_environ,
    fenced_blocks,
    readme_section,
    run,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.wheel]

PAGE = REPO / "docs" / "get-started.md"
#: The extras the page's path installs.
EXTRAS = {"api", "binary", "pool"}


def new_project_blocks() -> list[Block]:
    page = PAGE.read_text()
    part = page.split("<!-- new-project -->\n", 1)[1].split("<!-- /new-project -->", 1)[0]
    part = re.sub(
        r"<!-- readme: (.+?) -->.*?<!-- /readme -->",
        lambda mark: readme_section(mark.group(1)),
        part,
        flags=re.S,
    )
    return fenced_blocks(part)


def test_the_path_holds_no_step_of_the_repository_tour():
    text = "\n".join(block.text for block in new_project_blocks())
    assert "python manage.py migrate" in text and "rivet_worker" in text
    for only_in_the_repository in ("make ", "--kind noop", "--kind effect", "effect_project"):
        assert only_in_the_repository not in text


@pytest.fixture(scope="module")
def venv(tmp_path_factory, dist) -> Path:
    (wheel,) = dist.glob("django_rivet-*.whl")
    where = tmp_path_factory.mktemp("venv-get-started")
    run([sys.executable, "-m", "venv", str(where)], cwd=where, env=clean_environ())
    python = where / "bin" / "python"
    spec = f"django-rivet[{','.join(sorted(EXTRAS))}] @ {wheel.as_uri()}"
    run([str(python), "-m", "pip", "install", "-q", spec], cwd=where, env=clean_environ())
    return python


def test_the_new_project_path_runs_verbatim_from_the_wheel(venv, tmp_path):
    root = tmp_path / "mysite"
    root.mkdir()
    env = clean_environ(PATH=f"{venv.parent}{os.pathsep}{os.environ['PATH']}")
    env["PYTHONWARNINGS"] = os.environ.get("PYTHONWARNINGS", "")
    project = Project(python=venv, root=root, env=env)
    printed: list[str] = []
    for block in new_project_blocks():
        if block.lang != "sh":
            project.apply(block)
            continue
        for line in block.text.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[:2] == ["pip", "install"]:
                named = set(re.findall(r"[\[,](\w+)", words[2]))
                assert named <= EXTRAS | {"metrics"}, line
                continue
            if words[:2] == ["django-admin", "startproject"]:
                run([str(venv.parent / "django-admin"), *words[1:]], cwd=root, env=env)
            elif words[:2] == ["python", "manage.py"]:
                printed.append(project.manage(*words[2:]).stdout)
            else:
                pytest.fail(f"a step of the new-project path a new project cannot run: {line}")
    enqueues = [out.strip() for out in printed if out.startswith(("enqueued", "duplicate"))]
    assert enqueues == ["enqueued 2", "enqueued 3", "duplicate 3"], printed
    stats = dict(re.findall(r"^(\w[\w ]*?)\s{2,}(\S+)$", printed[-2], flags=re.M))
    assert (stats["done"], stats["ready"], stats["dead"]) == ("3", "0", "0"), printed[-2]
    assert project.shell_output and "task_id=1" in project.shell_output[0]
    assert (root / "db.sqlite3").is_file()
    written = (root / "rivet-openapi.yaml").read_text()
    assert written.startswith("openapi: 3.") and "/rivet/tasks/:" in written
