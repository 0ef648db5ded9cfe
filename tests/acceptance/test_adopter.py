"""The adopter's first hour: README.md's own steps, in a new project, on the built wheel.

For each set of extras, the wheel goes into a fresh virtualenv outside the repository;
``django-admin startproject`` makes a project; the code blocks of README.md's "Use it in your
project" section are applied as they are written there (a ``# path`` block is appended to that
file, a ``# python manage.py shell`` block runs in the shell, a ``sh`` block's ``python
manage.py`` lines run), so the README cannot drift from what is tested. Then the project is
used as an adopter would: enqueue through ``rivet.enqueue``, the CLI and the HTTP API, run a
worker, open the admin (with its CSS), the schema, Swagger UI and metrics, and run every rivet
command. Nothing of this repository but the wheel is on that project's path: no
``chaos_project``, no ``tests.settings``, no PYTHONPATH, no RIVET_* variables.

Each set has a PostgreSQL database of its own, named after the one DATABASE_URL names. One
virtualenv per set per run; pip's cache keeps a second run from downloading again.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import psycopg
import pytest
from django.conf import settings as django_settings

from tests.acceptance.adopter_kit import (
    PASSWORD,
    Block,
    Project,
    Server,
    assert_styled,
    clean_environ,
    readme_blocks,
    run,
    start_project,
)

#: The extras of each adopter; "core" is the bare ``pip install django-rivet``.
EXTRA_SETS = {"core": "", "api": "[api,binary]", "full": "[api,metrics,binary,pool]"}
#: A README block that only a project with the api extra can apply.
NEEDS_API = "(needs the api extra)"

pytestmark = [pytest.mark.acceptance, pytest.mark.wheel]


# -- the adopter's machine ------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    (built,) = dist.glob("django_rivet-*.whl")
    return built


@pytest.fixture(scope="module")
def venvs(tmp_path_factory, wheel):
    """One virtualenv per set of extras, made the first time a test asks for it."""
    made: dict[str, Path] = {}

    def venv(name: str) -> Path:
        if name not in made:
            where = tmp_path_factory.mktemp(f"venv-{name}")
            run([sys.executable, "-m", "venv", str(where)], cwd=where, env=clean_environ())
            python = where / "bin" / "python"
            spec = f"django-rivet{EXTRA_SETS[name]} @ {wheel.as_uri()}"
            run([str(python), "-m", "pip", "install", "-q", spec], cwd=where, env=clean_environ())
            made[name] = python
        return made[name]

    return venv


@pytest.fixture
def database(request, postgres_server):
    """A PostgreSQL database of this set's own, empty, dropped afterwards."""
    base = django_settings.DATABASES["default"]
    source = base.get("TEST", {}).get("NAME") or f"test_{base['NAME']}"
    name = f"{source}_adopter_{request.node.callspec.id}"
    params = {
        key: base[setting]
        for key, setting in (("host", "HOST"), ("port", "PORT"), ("user", "USER"))
        if base.get(setting)
    }
    if base.get("PASSWORD"):
        params["password"] = base["PASSWORD"]
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield {"NAME": name, **{key.upper(): str(value) for key, value in params.items()}}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- the first hour -------------------------------------------------------------------------


@pytest.mark.parametrize("extras", sorted(EXTRA_SETS))
def test_the_first_hour_of_an_adopter(extras, venvs, database, tmp_path):
    python = venvs(extras)
    project = start_project(python, tmp_path / "mysite", database)
    has_api = "api" in EXTRA_SETS[extras]
    url_block = None
    for block in readme_blocks():
        if block.lang == "python" and NEEDS_API in block.header and not has_api:
            url_block = block  # applied below, to see what a project without the extra meets
            continue
        project.apply(block)

    in_the_shell(project)
    the_cli_refuses_unknown_kinds(project)
    every_rivet_command(project, extras)
    if has_api:
        the_web(project, metrics="metrics" in EXTRA_SETS[extras])
    else:
        admin_only(project)
        assert url_block is not None
        without_the_api_extra(project, url_block)


#: Run in the project's shell once: where rivet comes from, what the README's steps did, and an
#: enqueue of an unknown kind through the Python API.
SHELL_CHECKS = """
import importlib.util, rivet
print(rivet.__file__)
for name in ("chaos_project", "effect_project", "tests.settings"):
    try:
        print(name, importlib.util.find_spec(name) is not None)
    except ImportError:
        print(name, False)
for task_id in (1, 2):
    task = rivet.get_task(task_id)
    print(task.kind, task.queue, task.state, task.result)
from rivet.errors import UnknownKind

try:
    rivet.enqueue("billing.invocie", {})
except UnknownKind as exc:
    print("refused", exc.code)
print(rivet.get_task(3))
"""


def in_the_shell(project: Project) -> None:
    """Nothing of the repository on the path; the README's two tasks done; an unknown kind
    refused by ``rivet.enqueue``."""
    assert project.shell_output == ["EnqueueResult(task_id=1, duplicate=False)\n"]
    where, *lines = project.shell(SHELL_CHECKS).splitlines()
    assert where.startswith(str(project.python.parents[1])) and "site-packages" in where
    assert lines == [
        "chaos_project False",
        "effect_project False",
        "tests.settings False",
        "billing.invoice mail done {'sent': 42}",
        "billing.invoice mail done {'sent': 43}",
        "refused unknown_kind",
        "None",
    ]
    stats = project.manage("rivet_stats", "--queue", "mail").stdout
    assert re.search(r"^done\s+2$", stats, flags=re.M), stats


def the_cli_refuses_unknown_kinds(project: Project) -> None:
    done = project.manage("rivet_enqueue", "--kind", "billing.invocie", code=2)
    (line,) = after_check_warnings(done.stderr)
    assert line.startswith("CommandError: nothing enqueued: unknown job kind 'billing.invocie'")
    assert "unknown job kind 'billing.invocie': no installed app registers it" in done.stderr
    assert "RIVET['ALLOW_UNKNOWN_KINDS'] = True" in done.stderr


def after_check_warnings(stderr: str) -> list[str]:
    """The lines after Django's system check warnings (rivet.W011 without [metrics])."""
    lines = stderr.strip().splitlines()
    if lines and lines[0] == "System check identified some issues:":
        last = max(i for i, line in enumerate(lines) if line.startswith("\tHINT:"))
        lines = lines[last + 1 :]
    return lines


def every_rivet_command(project: Project, extras: str) -> None:
    payload = '{"invoice_id": 45}'
    done = project.manage("rivet_enqueue", "--kind", "billing.invoice", "--payload", payload)
    assert done.stdout.strip() == "enqueued 3"
    worker = project.manage("rivet_worker", "--queue", "mail", "--once")
    # Without the pool extra the worker says so, and works with a connection per thread.
    assert ("pool_unavailable" in worker.stderr) is ("pool" not in EXTRA_SETS[extras])
    assert "pip install 'django-rivet[pool]'" in worker.stderr or "pool" in EXTRA_SETS[extras]
    assert "acked" in worker.stderr
    for args in (
        ("rivet_stats",),
        ("rivet_dlq", "--queue", "mail", "list"),
        ("rivet_dlq", "--queue", "mail", "sweep"),
        ("rivet_dlq", "--queue", "mail", "purge", "--yes"),
        ("rivet_prune", "--older-than", "30d", "--dry-run"),
    ):
        project.manage(*args)
    if extras == "full":
        listed = project.manage("help", "--commands").stdout.split()
        assert sorted(name for name in listed if name.startswith("rivet_")) == sorted(COMMANDS)


COMMANDS = (
    "rivet_dlq",
    "rivet_enqueue",
    "rivet_prune",
    "rivet_schedule",
    "rivet_schema",
    "rivet_stats",
    "rivet_worker",
)


def create_superuser(project: Project) -> None:
    project.env["DJANGO_SUPERUSER_PASSWORD"] = PASSWORD
    project.manage("createsuperuser", "--noinput", "--username", "ops", "--email", "o@x.test")
    del project.env["DJANGO_SUPERUSER_PASSWORD"]


def the_web(project: Project, *, metrics: bool) -> None:
    create_superuser(project)
    check = project.manage("check")
    # The project never asks for metrics (no METRICS_TOKEN, no RIVET_METRICS_PORT): no warning
    # about their extra, whether it is installed or not.
    assert "rivet.W011" not in check.stderr, check.stderr
    server = Server(project)
    try:
        server.admin_login()
        assert_styled(server, "/admin/")
        overview = assert_styled(server, "/admin/rivet/task/")
        assert overview
        status, headers, _ = server.get("/static/rivet/admin.css", auth=False)
        assert (status, headers["Content-Type"].split(";")[0]) == (200, "text/css")
        the_api(server)
        the_schema_and_docs(server)
        the_metrics(server, metrics=metrics)
    finally:
        server.stop()
    the_schema_command(project)
    worker = project.manage("rivet_worker", "--queue", "mail", "--once")
    assert "acked" in worker.stderr
    out = project.shell("import rivet\nprint(rivet.get_task(4).state)\n")
    assert out.strip() == "done"


def the_api(server: Server) -> None:
    body = {"kind": "billing.invoice", "payload": {"invoice_id": 44}}
    status, _, answer = server.post_json("/rivet/tasks/", body, **{"Idempotency-Key": "api-44"})
    assert status == 201, answer
    task = json.loads(answer)
    assert (task["id"], task["queue"], task["state"]) == (4, "mail", "pending"), task
    status, _, answer = server.post_json("/rivet/tasks/", {"kind": "billing.invocie"})
    assert status == 400, answer
    assert json.loads(answer)["code"] == "unknown_kind"
    status, _, answer = server.get("/rivet/queues/")
    assert status == 200 and b'"mail"' in answer, answer


def the_schema_and_docs(server: Server) -> None:
    status, _, answer = server.get("/rivet/schema/?format=json")
    assert status == 200, answer[:2000]
    schema = json.loads(answer)
    assert "/rivet/tasks/" in schema["paths"]
    metrics = schema["paths"]["/rivet/metrics/"]["get"]["responses"]
    assert "501" in metrics, sorted(metrics)
    status, headers, page = server.get("/rivet/docs/")
    assert status == 200 and headers["Content-Type"].startswith("text/html"), page[:2000]
    assets = re.findall(r'(?:href|src)="(/[^"]+)"', page.decode())
    assert len(assets) == 4, assets  # the favicon, the CSS and the two scripts
    for asset in assets:
        status, _, body = server.get(asset, auth=False)
        assert status == 200 and body, asset
    assert b"/rivet/schema/" in page


def the_schema_command(project: Project) -> None:
    """docs/http-api.md's command, in a project without drf_spectacular in INSTALLED_APPS."""
    assert "spectacular" not in project.manage("help", "--commands").stdout.split()
    project.manage("rivet_schema", "--validate", "--fail-on-warn", "--file", "rivet-openapi.yaml")
    written = (project.root / "rivet-openapi.yaml").read_text()
    assert written.startswith("openapi: 3.") and "/rivet/tasks/bulk/:" in written, written[:500]


def the_metrics(server: Server, *, metrics: bool) -> None:
    status, headers, answer = server.get("/rivet/metrics/")
    if metrics:
        assert status == 200, answer
        assert b'queue="mail"' in answer, answer
    else:
        assert status == 501, answer
        assert headers["Content-Type"] == "application/json"
        error = json.loads(answer)
        assert error["code"] == "extra_missing"
        assert "pip install 'django-rivet[metrics]'" in error["detail"]


def admin_only(project: Project) -> None:
    create_superuser(project)
    server = Server(project)
    try:
        server.admin_login()
        assert_styled(server, "/admin/rivet/task/")
    finally:
        server.stop()
    # The schema command without the api extra: one line naming it, exit 2.
    done = project.manage("rivet_schema", "--file", "rivet-openapi.yaml", code=2)
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'django-rivet[api]'" in done.stderr, done.stderr


def without_the_api_extra(project: Project, url_block: Block) -> None:
    """The README's URL include in a project without [api]: a check error, never a traceback."""
    urls = project.root / "mysite" / "urls.py"
    saved = urls.read_text()
    project.apply(url_block)
    try:
        for args in (("check",), *COMMAND_RUNS):
            done = project.manage(*args, code=1)
            assert "(rivet.E010)" in done.stderr, (args, done.stderr)
            assert "pip install 'django-rivet[api]'" in done.stderr, (args, done.stderr)
    finally:
        urls.write_text(saved)
    project.manage("check")


COMMAND_RUNS = (
    ("rivet_dlq", "list"),
    ("rivet_enqueue", "--kind", "billing.invoice"),
    ("rivet_prune", "--older-than", "30d", "--dry-run"),
    ("rivet_stats",),
    ("rivet_worker", "--once"),
)
