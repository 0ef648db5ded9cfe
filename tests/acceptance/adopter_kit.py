"""The adopter's kit: README.md's "Use it in your project" blocks, and a new project to apply
them to, driven by its own manage.py and runserver (tests/acceptance/test_adopter.py).

Nothing of this repository but the wheel is on that project's path: its environment drops
PYTHONPATH, DJANGO_SETTINGS_MODULE and every RIVET_*, DATABASE_URL, EFFECT_* and DJANGO_*
variable.
"""

from __future__ import annotations

import base64
import http.cookiejar
import json
import os
import re
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from chaos_project.kit.services import free_port

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Use it in your project"
#: The superuser's password in every adopter's project.
PASSWORD = "adopter-pw-1"


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


def readme_section(title: str) -> str:
    """README.md's ``## title`` section, its heading included."""
    text = (REPO / "README.md").read_text()
    heading = f"## {title}\n"
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end == -1 else text[start:end]


def fenced_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, in order."""
    found = re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.M | re.S)
    return [Block(lang, body) for lang, body in found]


def readme_blocks() -> list[Block]:
    return fenced_blocks(readme_section(SECTION.removeprefix("## ")))


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
