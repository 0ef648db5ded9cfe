"""The distribution: the sdist and wheel build, the wheel holds rivet only, and a host runs on it.

The wheel is installed into a fresh virtualenv (with Django and psycopg from PyPI, through pip's
cache) and a tiny host project outside the repository migrates, enqueues and runs a worker.
``-m 'not wheel'`` leaves it out; ``make test`` runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.acceptance, pytest.mark.wheel]

#: Files the app cannot run without, which are not Python modules.
DATA_FILES = [
    "rivet/py.typed",
    "rivet/stores/postgres/postgres.sql",
    "rivet/stores/postgres/functions.sql",
    "rivet/stores/sqlite.sql",
    "rivet/admin/postgres.sql",
    "rivet/static/rivet/admin.css",
    "rivet/templates/admin/rivet/queue_overview.html",
    "rivet/templates/admin/rivet/task/change_list.html",
    "rivet/templates/admin/rivet/deadletter/change_list.html",
    "rivet/migrations/0001_initial.py",
    "rivet/contrib/prometheus/rivet-rules.yml",
    "rivet/contrib/grafana/rivet-dashboard.json",
]

HOST_SETTINGS = """
    from pathlib import Path

    BASE = Path(__file__).resolve().parent
    SECRET_KEY = "host-project-test"
    USE_TZ = True
    INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "rivet"]
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(BASE / "host.sqlite3")}
    }
    RIVET = {"JOB_MODULES": ["hostjobs"]}
"""

HOST_JOBS = """
    import rivet


    @rivet.job("noop")
    def noop(context):
        return {"ran": context.payload}
"""

HOST_CHECK = """
    import sys

    import django

    django.setup()
    import rivet

    assert "site-packages" in rivet.__file__, rivet.__file__
    for name in ("chaos_project", "effect_project", "bench", "tests"):
        try:
            __import__(name)
        except ImportError:
            continue
        sys.exit(f"{name} is importable from the installed wheel")
    (task,) = [rivet.get_task(task_id) for task_id in (1,)]
    print(task.state, task.attempts, task.result)
"""


def tools_env() -> dict[str, str]:
    """The environment for pip and build: the suite's warnings-are-errors is for rivet's code."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}


def run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    env = tools_env() if env is None else env
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, args))} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def test_the_wheel_ships_rivet_only_with_its_data_files(dist):
    (wheel,) = dist.glob("django_rivet-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"rivet", wheel.name.split("-py3")[0] + ".dist-info"}, sorted(tops)
    # The effect client and the database-URL helper serve the repository's projects only.
    shipped = [name for name in ("rivet/effect_client.py", "rivet/dbconfig.py") if name in names]
    assert shipped == [], f"repository helpers in the wheel: {shipped}"
    missing = [name for name in DATA_FILES if name not in names]
    assert not missing, f"not in the wheel: {missing}"
    metadata = zipfile.ZipFile(wheel).read(wheel.name.split("-py3")[0] + ".dist-info/METADATA")
    requires = [
        line.split(":", 1)[1].strip()
        for line in metadata.decode().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    core = sorted(r for r in requires if "extra ==" not in r)
    assert [re.split(r"[<>=;]", r)[0] for r in core] == [
        "Django",
        "cronsim",
        "django-tasks",
        "psycopg",
    ], core
    assert 'django-tasks>=0.12; python_version < "3.12"' in core
    fields = metadata.decode().split("\n\n", 1)[0].splitlines()
    extras = sorted(
        line.split(":", 1)[1].strip() for line in fields if line.startswith("Provides-Extra:")
    )
    # The repository's own tools are dependency groups, never published extras.
    assert extras == ["api", "binary", "metrics", "otel", "pool"], extras
    assert any(line.startswith("Classifier: Development Status :: ") for line in fields)
    urls = [line for line in fields if line.startswith("Project-URL:")]
    assert {line.split(":", 1)[1].split(",")[0].strip() for line in urls} >= {
        "Homepage",
        "Documentation",
        "Source",
    }, urls


def test_the_index_page_is_the_short_readme_and_its_links_name_files_that_exist(dist):
    (wheel,) = dist.glob("django_rivet-*.whl")
    metadata = zipfile.ZipFile(wheel).read(wheel.name.split("-py3")[0] + ".dist-info/METADATA")
    description = metadata.decode().split("\n\n", 1)[1]
    assert description.strip() == (REPO / "docs" / "pypi.md").read_text().strip()
    links = re.findall(r"\]\((\S+?)\)", description)
    assert links, "the index page links into the documentation"
    for link in links:
        # The index page has no repository beside it: every link is absolute.
        assert link.startswith("https://"), link
        if "/blob/main/" in link:
            assert (REPO / link.split("/blob/main/", 1)[1]).is_file(), link


def test_the_sdist_carries_the_sources_and_leaves_the_repository_projects_out(dist):
    (sdist,) = dist.glob("django_rivet-*.tar.gz")
    import tarfile

    names = tarfile.open(sdist).getnames()
    assert any(name.endswith("/rivet/stores/sqlite.sql") for name in names)
    assert any(name.endswith("/pyproject.toml") for name in names)


def test_a_host_project_runs_on_the_installed_wheel(dist, tmp_path):
    (wheel,) = dist.glob("django_rivet-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    python = str(venv / "bin" / "python")
    # pip's own cache (~/.cache/pip) keeps the second run from downloading again.
    run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)],
        cwd=tmp_path,
    )
    host = tmp_path / "host"
    host.mkdir()
    (host / "hostsettings.py").write_text(textwrap.dedent(HOST_SETTINGS))
    (host / "hostjobs.py").write_text(textwrap.dedent(HOST_JOBS))
    (host / "check.py").write_text(textwrap.dedent(HOST_CHECK))
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV")
        and not key.startswith("RIVET_")
    }
    env.update(DJANGO_SETTINGS_MODULE="hostsettings", PYTHONPATH=str(host))
    django_admin = [python, "-m", "django"]
    run([*django_admin, "migrate", "--no-input"], cwd=host, env=env)
    out = run(
        [*django_admin, "rivet_enqueue", "--kind", "noop", "--payload", "7"], cwd=host, env=env
    )
    assert "1" in out
    run([*django_admin, "rivet_worker", "--once"], cwd=host, env=env)
    assert run([python, "check.py"], cwd=host, env=env).split() == ["done", "1", "{'ran':", "7}"]
