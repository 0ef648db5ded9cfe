#!/usr/bin/env python3
"""Find (or start) a PostgreSQL server for rivet's tests, run a command against it, clean up.

Usage::

    scripts/find_postgres.py run -- COMMAND [ARG...]

The command runs with ``DATABASE_URL`` (the tests' server and database) and
``EFFECT_DATABASE_URL`` (a second database on the same server) in its environment, plus
``RIVET_PG_SOURCE`` naming where the server came from. Whatever this script started is stopped
and deleted afterwards, and it exits with the command's exit code.

Where the server comes from, first match wins:

a. ``DATABASE_URL`` from the environment, then from ``.env``, if a PostgreSQL server answers
   there (a short connection to its ``postgres`` maintenance database).
b. A throwaway container (testcontainers, image ``postgres:15``) if a Docker engine answers.
c. A throwaway cluster made with the local ``initdb``/``pg_ctl`` (found through
   ``pg_config --bindir``), on a free port on 127.0.0.1, trust auth, run as the ``postgres`` OS
   user when we are root (initdb refuses root).
d. Nothing: exit 3 with instructions. The tests are never skipped silently.

Knobs (mainly for testing this script itself):

``RIVET_PG_DISCOVERY``
    comma-separated sources to try, of ``url``, ``docker``, ``initdb`` (default: all three);
    ``url-only`` means ``url``.
``RIVET_PG_DISCOVERY_SKIP_DOTENV=1``
    do not read ``DATABASE_URL`` from ``.env``.
``RIVET_PG_CONNECT_TIMEOUT``
    seconds to wait for a server to answer (default 3).
``RIVET_PG_DOCKER_IMAGE``
    image for source b (default ``postgres:15``).
``RIVET_PG_TMPDIR``
    parent folder of the throwaway cluster of source c (default ``/tmp`` as root, else the
    usual temporary folder).
``RIVET_PG_OS_USER``
    OS user that owns the throwaway cluster when we run as root (default ``postgres``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
# The throwaway cluster code is chaos_project.chaos.pgcluster (standard library only).
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
PG_SCHEMES = {"postgres", "postgresql", "pgsql", "postgis"}
SOURCES = ("url", "docker", "initdb")
DEFAULT_DB_NAME = "rivet"
DEFAULT_IMAGE = "postgres:15"
CLUSTER_PREFIX = "rivet-pg-"
EXIT_NO_POSTGRES = 3
# libpq parameters that may ride along in a URL's query string; django-environ's own options
# (conn_max_age, ...) are not libpq's and are left out of the probe.
LIBPQ_QUERY_KEYS = {"sslmode", "sslrootcert", "sslcert", "sslkey", "options", "application_name"}

HELP_NO_POSTGRES = """\
rivet's tests need a PostgreSQL server, and none was found or could be started.
Get one in any of these ways, then run `make test` again:
  * point DATABASE_URL at a server you have, e.g.
        export DATABASE_URL=postgres://USER[:PASSWORD]@HOST:5432/rivet
    (the user needs CREATEDB: the tests create test_<name> next to it);
  * start the compose database (DATABASE_URL in .env already points at it):
        docker compose up -d rivet-db
  * install PostgreSQL so that a throwaway cluster can be started with initdb/pg_ctl,
    e.g. `apt-get install postgresql` (Debian/Ubuntu) or `brew install postgresql` (macOS);
    `pg_config --bindir` must name the folder that holds initdb and pg_ctl."""


class Unavailable(Exception):
    """A source cannot provide a server; the message says why."""


class Terminated(Exception):
    """SIGTERM or SIGHUP arrived while no command was running."""


def say(message: str) -> None:
    print(f"find_postgres: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# URLs


def is_postgres_url(url: str) -> bool:
    return urlsplit(url).scheme.lower() in PG_SCHEMES


def _netloc_parts(url: str) -> tuple[str, str, str, str]:
    """(user, password, host, port), percent-decoded; keeps the case of socket paths."""
    netloc = urlsplit(url).netloc
    userinfo, _, hostport = netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    return unquote(user), unquote(password), unquote(host), port


def db_name(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/")) or DEFAULT_DB_NAME


def with_db_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(name, safe="")))


def masked(url: str) -> str:
    parts = urlsplit(url)
    user, password, _, _ = _netloc_parts(url)
    if not password:
        return url
    hostport = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}:***@{hostport}"))


def connect_kwargs(url: str, dbname: str) -> dict[str, object]:
    user, password, host, port = _netloc_parts(url)
    kwargs: dict[str, object] = {"dbname": dbname}
    if user:
        kwargs["user"] = user
    if password:
        kwargs["password"] = password
    if host:
        kwargs["host"] = host
    if port:
        kwargs["port"] = port
    for key, value in parse_qsl(urlsplit(url).query):
        if key in LIBPQ_QUERY_KEYS:
            kwargs[key] = value
    return kwargs


def connect_timeout() -> int:
    # libpq treats anything below 2 seconds as 2.
    return max(2, int(float(os.environ.get("RIVET_PG_CONNECT_TIMEOUT", "3"))))


def _psycopg():
    try:
        import psycopg
    except ImportError:
        say("psycopg is not installed in this Python; run `make venv` and use .venv/bin/python")
        sys.exit(2)
    return psycopg


def probe(url: str) -> str:
    """The server's version if a PostgreSQL server answers at ``url``; else raise Unavailable."""
    psycopg = _psycopg()
    try:
        with psycopg.connect(
            **connect_kwargs(url, "postgres"), connect_timeout=connect_timeout(), autocommit=True
        ) as conn:
            return str(conn.execute("SHOW server_version").fetchone()[0])
    except psycopg.Error as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise Unavailable(detail) from None


def ensure_databases(url: str, names: list[str]) -> None:
    """Create the named databases if missing (best effort: the tests report what still fails)."""
    psycopg = _psycopg()
    from psycopg import sql

    try:
        with psycopg.connect(
            **connect_kwargs(url, "postgres"), connect_timeout=connect_timeout(), autocommit=True
        ) as conn:
            for name in names:
                found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if found.fetchone():
                    continue
                try:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                    say(f"created database {name!r}")
                except psycopg.errors.DuplicateDatabase:
                    pass  # a concurrent run made it first
    except psycopg.Error as exc:
        say(f"could not make sure databases {names} exist: {' '.join(str(exc).split())}")


# --------------------------------------------------------------------------------------------
# a. a server that is already there


def read_dotenv(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return values
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def url_candidates() -> list[tuple[str, str]]:
    candidates = []
    if os.environ.get("DATABASE_URL"):
        candidates.append(("environment", os.environ["DATABASE_URL"]))
    if os.environ.get("RIVET_PG_DISCOVERY_SKIP_DOTENV", "") not in ("", "0"):
        say("not reading .env (RIVET_PG_DISCOVERY_SKIP_DOTENV is set)")
    else:
        dotenv_url = read_dotenv(REPO_ROOT / ".env").get("DATABASE_URL")
        if dotenv_url and dotenv_url not in (url for _, url in candidates):
            candidates.append((".env", dotenv_url))
    return candidates


def existing_server(notes: list[str]) -> tuple[str, str] | None:
    candidates = url_candidates()
    if not candidates:
        notes.append("url: no DATABASE_URL in the environment or in .env")
    for origin, url in candidates:
        if not is_postgres_url(url):
            notes.append(f"url: DATABASE_URL from {origin} ({masked(url)}) is not PostgreSQL")
            say(notes[-1] + "; ignored")
            continue
        try:
            version = probe(url)
        except Unavailable as exc:
            notes.append(f"url: no answer at DATABASE_URL from {origin} ({masked(url)}): {exc}")
            say(notes[-1])
            continue
        say(f"PostgreSQL {version} answers at DATABASE_URL from {origin}")
        return origin, url
    return None


# --------------------------------------------------------------------------------------------
# b. a throwaway container


def docker_engine_answers() -> str | None:
    """None if a Docker engine answers, else the reason it does not."""
    docker = shutil.which("docker")
    if not docker:
        return "no docker CLI on PATH"
    try:
        result = subprocess.run(
            [docker, "info"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`docker info` failed: {exc}"
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        return f"`docker info` exited {result.returncode}" + (f": {lines[-1]}" if lines else "")
    return None


@contextlib.contextmanager
def docker_server(name: str) -> Iterator[str]:
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        try:
            from testcontainers.postgres import PostgresContainer
        except ImportError:
            raise Unavailable("testcontainers is not installed (run `make venv`)") from None
    image = os.environ.get("RIVET_PG_DOCKER_IMAGE", DEFAULT_IMAGE)
    say(f"starting a throwaway {image} container (testcontainers)")
    container = PostgresContainer(image, username="postgres", password="postgres", dbname=name)
    # A throwaway server: durability buys nothing, connections are cheap.
    container.with_command("postgres -c fsync=off -c synchronous_commit=off -c max_connections=200")
    try:
        container.start()
    except Exception as exc:
        with contextlib.suppress(Exception):
            container.stop()
        raise Unavailable(f"the container did not start: {exc}") from None
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(5432)
        yield f"postgres://postgres:postgres@{host}:{port}/{quote(name, safe='')}"
    finally:
        say("stopping the throwaway container")
        with contextlib.suppress(Exception):
            container.stop()


# --------------------------------------------------------------------------------------------
# c. a throwaway cluster from the local initdb / pg_ctl


def become_subreaper() -> None:
    """Adopt orphans: pg_ctl's postmaster then becomes our child, and we reap it at the end."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reap_children(wait_secs: float = 5.0) -> None:
    deadline = time.monotonic() + wait_secs
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no children left
        if pid == 0:
            if time.monotonic() > deadline:
                return  # something the command left behind still runs; init inherits it
            time.sleep(0.05)


@contextlib.contextmanager
def initdb_server(name: str) -> Iterator[str]:
    """The cluster code is chaos_project.chaos.pgcluster's (the chaos harness uses it too)."""
    from chaos_project.chaos.pgcluster import Cluster, ClusterError

    become_subreaper()
    try:
        cluster = Cluster.create(
            prefix=CLUSTER_PREFIX,
            parent=os.environ.get("RIVET_PG_TMPDIR") or None,
            os_user=os.environ.get("RIVET_PG_OS_USER", "postgres"),
            say=say,
        )
    except ClusterError as exc:
        reap_children()
        raise Unavailable(str(exc)) from None
    try:
        say(f"throwaway cluster listening on 127.0.0.1:{cluster.port}")
        yield cluster.url(name)
    finally:
        say(f"stopping and deleting the throwaway cluster in {cluster.root}")
        cluster.remove()
        reap_children()


# --------------------------------------------------------------------------------------------
# choosing and running


def enabled_sources() -> list[str]:
    raw = os.environ.get("RIVET_PG_DISCOVERY", "").strip()
    if not raw or raw == "all":
        return list(SOURCES)
    chosen = []
    for item in raw.split(","):
        item = item.strip().removesuffix("-only")
        if item not in SOURCES:
            say(f"RIVET_PG_DISCOVERY: unknown source {item!r}; known: {', '.join(SOURCES)}")
            sys.exit(2)
        chosen.append(item)
    return chosen


@contextlib.contextmanager
def postgres_server() -> Iterator[tuple[str, str]]:
    """Yield (source, url) of a server that answers; stop what was started on the way out."""
    sources = enabled_sources()
    notes: list[str] = []
    if "url" in sources:
        found = existing_server(notes)
        if found:
            yield found
            return
    else:
        notes.append("url: skipped (RIVET_PG_DISCOVERY)")
    env_url = os.environ.get("DATABASE_URL", "")
    name = db_name(env_url) if env_url and is_postgres_url(env_url) else DEFAULT_DB_NAME
    starters = (("docker", docker_server), ("initdb", initdb_server))
    for source, starter in starters:
        if source not in sources:
            notes.append(f"{source}: skipped (RIVET_PG_DISCOVERY)")
            continue
        if source == "docker":
            reason = docker_engine_answers()
            if reason:
                notes.append(f"docker: no Docker engine ({reason})")
                say(notes[-1])
                continue
        try:
            with starter(name) as url:
                try:
                    probe(url)
                except Unavailable as exc:
                    raise Unavailable(f"started, but it does not answer: {exc}") from None
                yield source, url
                return
        except Unavailable as exc:
            notes.append(f"{source}: {exc}")
            say(notes[-1])
    say("no PostgreSQL server. What was tried:")
    for note in notes:
        print(f"  - {note}", file=sys.stderr)
    print(HELP_NO_POSTGRES, file=sys.stderr, flush=True)
    sys.exit(EXIT_NO_POSTGRES)


def effect_url_for(source: str, url: str) -> str:
    explicit = os.environ.get("EFFECT_DATABASE_URL", "")
    if source == "environment" and explicit and is_postgres_url(explicit):
        return explicit
    # A second database on the same server, named after the first (rivet -> rivet_effect), so
    # that concurrent runs with different DATABASE_URL names do not share it.
    return with_db_name(url, f"{db_name(url)}_effect")


def run_command(command: list[str], env: dict[str, str]) -> int:
    proc = subprocess.Popen(command, env=env)
    previous = {}

    def forward(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, forward)
    # Ctrl-C reaches the whole foreground process group, the command included: let it decide.
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def on_terminate(signum, frame):
    raise Terminated(signal.Signals(signum).name)


def cmd_run(command: list[str]) -> int:
    if not command:
        say("nothing to run: scripts/find_postgres.py run -- COMMAND [ARG...]")
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_terminate)
    try:
        with postgres_server() as (source, url):
            effect_url = effect_url_for(source, url)
            ensure_databases(url, [db_name(url), db_name(effect_url)])
            env = dict(os.environ)
            env.update(
                DATABASE_URL=url,
                EFFECT_DATABASE_URL=effect_url,
                RIVET_PG_SOURCE=source,
            )
            say(f"source: {source}; DATABASE_URL={masked(url)}")
            say(f"EFFECT_DATABASE_URL={masked(effect_url)}")
            say(f"running: {shlex.join(command)}")
            code = run_command(command, env)
            say(f"command exited {code}")
            return code
    except Terminated as exc:
        say(f"stopped by {exc}")
        return 143


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] != "run":
        say(f"unknown subcommand {argv[0]!r}; see --help")
        return 2
    rest = argv[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    return cmd_run(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
