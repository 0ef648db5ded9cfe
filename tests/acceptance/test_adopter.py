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

import base64
import http.cookiejar
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from django.conf import settings as django_settings

from chaos_project.kit.services import free_port

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Use it in your project"
#: The extras of each adopter; "core" is the bare ``pip install django-rivet``.
EXTRA_SETS = {"core": "", "api": "[api,binary]", "full": "[api,metrics,binary,pool]"}
#: A README block that only a project with the api extra can apply.
NEEDS_API = "(needs the api extra)"
PASSWORD = "adopter-pw-1"

pytestmark = [pytest.mark.acceptance, pytest.mark.wheel]


# -- the README -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    lang: str
    text: str

    @property
    def header(self) -> str:
        """The first line of a python block, without ``# ``: where the block goes."""
        first = self.text.splitlines()[0]
        assert first.startswith("# "), f"a python block of the README names its file:\n{self.text}"
        return first[2:]

    @property
    def target(self) -> str:
        return self.header.split(":", 1)[0].strip()


def readme_blocks() -> list[Block]:
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION + "\n")
    end = text.index("\n## ", start + len(SECTION))
    found = re.findall(r"^```(\w*)\n(.*?)^```$", text[start:end], flags=re.M | re.S)
    return [Block(lang, body) for lang, body in found]


def manage_lines(block: Block) -> list[list[str]]:
    """The ``python manage.py ...`` commands of a sh block, as argument lists."""
    commands = []
    for line in block.text.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[:2] == ["python", "manage.py"]:
            commands.append(words[2:])
        else:
            assert words[:2] == ["pip", "install"], f"a README step the test cannot run: {line}"
    return commands


def test_the_section_is_what_the_adopter_test_applies():
    blocks = readme_blocks()
    python = [block for block in blocks if block.lang == "python"]
    targets = [block.target for block in python]
    assert targets == [
        "mysite/settings.py",
        "mysite/urls.py",
        "mysite/settings.py",
        "billing/jobs.py",
        "python manage.py shell",
    ], targets
    # The first two blocks are the two lines: rivet in INSTALLED_APPS, and the URL include.
    assert python[0].text.strip().splitlines()[1:] == ['INSTALLED_APPS += ["rivet"]']
    assert 'urlpatterns += [path("rivet/", include("rivet.urls"))]' in python[1].text
    installs = [
        words[2]
        for block in blocks
        if block.lang == "sh"
        for words in map(shlex.split, block.text.splitlines())
        if words[:2] == ["pip", "install"]
    ]
    extras = {name for spec in installs for name in re.findall(r"[\[,](\w+)", spec)}
    assert extras == {"binary", "pool", "api", "metrics"}, installs


def test_the_index_page_shows_the_readme_s_two_lines_and_job():
    page = (REPO / "docs" / "pypi.md").read_text()
    blocks = {block.target: block.text for block in readme_blocks() if block.lang == "python"}
    assert 'INSTALLED_APPS += ["rivet"]' in page
    assert 'urlpatterns += [path("rivet/", include("rivet.urls"))]' in page
    job = blocks["billing/jobs.py"].split("\n", 1)[1]  # below its "# billing/jobs.py" line
    assert job in page, "docs/pypi.md shows README.md's job, word for word"


# -- the adopter's machine ------------------------------------------------------------------


def clean_environ(**extra: str) -> dict[str, str]:
    """The environment of a new project: nothing of this repository's configuration."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONWARNINGS")
        and not key.startswith(("RIVET_", "DATABASE_URL", "EFFECT_", "DJANGO_"))
    }
    env.update(extra)
    return env


def run(args: list[str], *, cwd: Path, env: dict[str, str], code: int | None = 0):
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if code is not None:
        assert done.returncode == code, (
            f"{' '.join(map(str, args))} exited {done.returncode}, not {code}\n"
            f"{done.stdout}\n{done.stderr}"
        )
    assert "Traceback" not in done.stderr, done.stderr
    return done


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


@dataclass
class Project:
    """A project made by django-admin startproject, driven with its own manage.py."""

    python: Path
    root: Path
    env: dict[str, str]
    shell_output: list[str] = field(default_factory=list)

    def manage(self, *args: str, code: int | None = 0) -> subprocess.CompletedProcess:
        return run([str(self.python), "manage.py", *args], cwd=self.root, env=self.env, code=code)

    def shell(self, code: str) -> str:
        return self.manage("shell", "-v", "0", "-c", code).stdout

    def apply(self, block: Block) -> None:
        if block.lang == "sh":
            for args in manage_lines(block):
                self.manage(*args)
        elif block.target == "python manage.py shell":
            self.shell_output.append(self.shell(block.text))
        else:
            path = self.root / block.target
            with path.open("a") as stream:
                stream.write("\n" + block.text)


def start_project(python: Path, where: Path, database: dict[str, str]) -> Project:
    where.mkdir()
    bin_dir = python.parent
    env = clean_environ(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    run([str(bin_dir / "django-admin"), "startproject", "mysite", "."], cwd=where, env=env)
    # The project's processes, as every process the suite starts, fail on a deprecation.
    env["PYTHONWARNINGS"] = os.environ.get("PYTHONWARNINGS", "")
    # The database is the test's own choice, not a README step: PostgreSQL, this set's own.
    engine = {"ENGINE": "django.db.backends.postgresql", **database}
    with (where / "mysite" / "settings.py").open("a") as stream:
        stream.write(f"\nDATABASES = {{'default': {engine!r}}}\n")
    return Project(python=python, root=where, env=env)


# -- HTTP -----------------------------------------------------------------------------------


class Server:
    """``manage.py runserver`` of the project, on a free port, stopped at the end."""

    def __init__(self, project: Project) -> None:
        self.port = free_port()
        self.log = (project.root / "runserver.log").open("w")
        self.process = subprocess.Popen(
            [str(project.python), "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            cwd=project.root,
            env=project.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        # A browser (the admin's session cookie), and an API client (HTTP Basic, no cookies:
        # a session would make DRF ask for a CSRF token).
        cookies = urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        self.browser = urllib.request.build_opener(cookies)
        self.client = urllib.request.build_opener()
        deadline = time.monotonic() + 60
        while True:
            try:
                self.get("/admin/login/")
                return
            except OSError:
                assert self.process.poll() is None, (project.root / "runserver.log").read_text()
                assert time.monotonic() < deadline, "runserver did not answer within 60 s"
                time.sleep(0.3)

    def request(self, path: str, *, data: bytes | None = None, headers=None, auth=True):
        """(status, headers, body); ``auth``: the API client with HTTP Basic as the superuser,
        else the browser."""
        headers = dict(headers or {})
        opener = self.client if auth else self.browser
        if auth:
            token = base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        url = f"http://127.0.0.1:{self.port}{path}"
        req = urllib.request.Request(url, data=data, headers=headers)
        try:
            with opener.open(req, timeout=60) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    def get(self, path: str, **kwargs):
        return self.request(path, **kwargs)

    def post_json(self, path: str, body: dict, **headers: str):
        data = json.dumps(body).encode()
        return self.request(
            path, data=data, headers={"Content-Type": "application/json", **headers}
        )

    def admin_login(self) -> None:
        status, _, page = self.get("/admin/login/", auth=False)
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1).decode()
        form = f"csrfmiddlewaretoken={token}&username=ops&password={PASSWORD}&next=/admin/"
        status, _, page = self.request(
            "/admin/login/?next=/admin/",
            data=form.encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            auth=False,
        )
        assert status == 200 and b"Log out" in page, page[:2000]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def stylesheets(page: bytes) -> list[str]:
    return re.findall(r'<link rel="stylesheet"[^>]*href="([^"]+)"', page.decode())


def assert_styled(server: Server, path: str) -> list[str]:
    status, _, page = server.get(path, auth=False)
    assert status == 200, page[:500]
    sheets = stylesheets(page)
    assert sheets, f"{path} links no stylesheet"
    for sheet in sheets:
        status, headers, body = server.get(sheet, auth=False)
        assert status == 200 and headers["Content-Type"].startswith("text/css"), (sheet, status)
        assert body
    return sheets


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
    assert ("rivet.W011" in check.stderr) is (not metrics), check.stderr
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
