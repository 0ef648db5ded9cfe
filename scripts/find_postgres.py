#!/usr/bin/env python3
"""Find or start a PostgreSQL server for rivet's tests, run a command against it, clean up.

Usage::

    scripts/find_postgres.py run -- COMMAND [ARG...]

The command runs with ``DATABASE_URL`` (the tests' server and database), ``EFFECT_DATABASE_URL``
(a second database on the same server) and ``RIVET_PG_SOURCE`` (where the server came from) in
its environment. Whatever this script started is stopped and deleted afterwards, and it exits
with the command's exit code. The first source that gives a server wins:

``url``
    ``DATABASE_URL`` from the environment, then from ``.env``, if a server answers there.
``docker``
    a throwaway ``postgres:15`` container (testcontainers), if a Docker engine answers.
``initdb``
    a throwaway cluster on a free port of 127.0.0.1, made with the local ``initdb``/``pg_ctl``
    (``pg_config --bindir``) by ``chaos_project.chaos.pgcluster``, the chaos harness's code.

If none does, it exits 3 naming what it tried and how to get a server: the tests never skip.

``RIVET_PG_DISCOVERY=url,initdb`` tries only the sources named (in their usual order);
``RIVET_PG_DISCOVERY_SKIP_DOTENV=1`` leaves ``.env`` out; ``RIVET_PG_TMPDIR`` is the folder the
throwaway cluster is made in; as root (initdb refuses root) the cluster runs as the OS user
``RIVET_PG_OS_USER`` (default ``postgres``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from chaos_project.chaos.pgcluster import Cluster, ClusterError  # noqa: E402 (stdlib only)

SOURCES = ("url", "docker", "initdb")
PG_SCHEMES = {"postgres", "postgresql", "pgsql", "postgis"}
# libpq's own URL parameters; django-environ's options (conn_max_age, ...) would make it refuse.
LIBPQ_QUERY_KEYS = {"sslmode", "sslrootcert", "sslcert", "sslkey", "options", "application_name"}
DEFAULT_DB_NAME = "rivet"
DOCKER_IMAGE = "postgres:15"
CLUSTER_PREFIX = "rivet-pg-"
CONNECT_TIMEOUT_SECS = 3
EXIT_USAGE = 2
EXIT_NO_POSTGRES = 3

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
    """A source cannot give a server; the message says why."""


class NoPostgres(Exception):
    """No source gave a server; ``tried`` says what each one answered."""

    def __init__(self, tried: list[str]) -> None:
        super().__init__("no PostgreSQL server")
        self.tried = tried


def say(message: str) -> None:
    print(f"find_postgres: {message}", file=sys.stderr, flush=True)


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


# URLs


def is_postgres_url(url: str) -> bool:
    return urlsplit(url).scheme.lower() in PG_SCHEMES


def db_name(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/")) or DEFAULT_DB_NAME


def with_db_name(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + quote(name, safe="")))


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hostport}"))


def maintenance_url(url: str) -> str:
    """The same server's ``postgres`` database, in a form libpq accepts."""
    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k in LIBPQ_QUERY_KEYS])
    return urlunsplit(parts._replace(scheme="postgresql", path="/postgres", query=query))


def read_dotenv(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of a .env file (quotes and ``export`` allowed); {} when missing."""
    values: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.strip().removeprefix("export ").strip()
            key, sep, value = line.partition("=")
            if not sep or line.startswith("#"):
                continue
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            values[key.strip()] = value
    return values


# The server


def connect(url: str):
    import psycopg

    return psycopg.connect(
        maintenance_url(url), connect_timeout=CONNECT_TIMEOUT_SECS, autocommit=True
    )


def probe(url: str) -> str:
    """The server's version if PostgreSQL answers at ``url``; else raise Unavailable."""
    import psycopg

    try:
        with connect(url) as conn:
            return str(conn.execute("SHOW server_version").fetchone()[0])
    except psycopg.Error as exc:
        raise Unavailable(one_line(exc)) from None


def ensure_databases(url: str, names: list[str]) -> None:
    """Create the named databases when missing (best effort; a concurrent run may be first)."""
    import psycopg
    from psycopg import sql

    try:
        with connect(url) as conn:
            for name in names:
                exists = "SELECT 1 FROM pg_database WHERE datname = %s"
                if conn.execute(exists, (name,)).fetchone():
                    continue
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                    say(f"created database {name!r}")
    except psycopg.Error as exc:  # the tests then say what is missing, in their own words
        say(f"could not make sure databases {names} exist: {one_line(exc)}")


def url_candidates() -> list[tuple[str, str]]:
    """(origin, url): DATABASE_URL from the environment, then from .env."""
    found = [("environment", os.environ.get("DATABASE_URL", ""))]
    if os.environ.get("RIVET_PG_DISCOVERY_SKIP_DOTENV", "") in ("", "0"):
        found.append((".env", read_dotenv(REPO_ROOT / ".env").get("DATABASE_URL", "")))
    return [(origin, url) for origin, url in found if url]


def answering_url(tried: list[str]) -> tuple[str, str] | None:
    candidates = url_candidates()
    if not candidates:
        tried.append("url: no DATABASE_URL in the environment or in .env")
    for origin, url in candidates:
        where = f"DATABASE_URL from {origin} ({masked(url)})"
        try:
            if not is_postgres_url(url):
                raise Unavailable("it is not a PostgreSQL URL")
            version = probe(url)
        except Unavailable as exc:
            tried.append(f"url: {where}: {exc}")
            say(tried[-1])
            continue
        say(f"PostgreSQL {version} answers at {where}")
        return origin, url
    return None


@contextlib.contextmanager
def docker_server(name: str) -> Iterator[str]:
    """A throwaway container; without a Docker engine it fails at once (the client asks first)."""
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        try:  # testcontainers before 4.8
            from testcontainers.postgres import PostgresContainer
        except ImportError:
            raise Unavailable("testcontainers is not installed (run `make venv`)") from None
    try:
        container = PostgresContainer(
            DOCKER_IMAGE, username="postgres", password="postgres", dbname=name
        )
    except Exception as exc:  # docker's client raises its own errors, and requests' too
        raise Unavailable(f"no Docker engine answers ({one_line(exc)})") from None
    # A throwaway server: durability buys nothing.
    container.with_command("postgres -c fsync=off -c synchronous_commit=off -c max_connections=200")
    try:
        say(f"starting a throwaway {DOCKER_IMAGE} container (testcontainers)")
        try:
            container.start()
        except Exception as exc:
            raise Unavailable(f"the container did not start ({one_line(exc)})") from None
        host, port = container.get_container_host_ip(), container.get_exposed_port(5432)
        yield f"postgres://postgres:postgres@{host}:{port}/{quote(name, safe='')}"
    finally:
        say("stopping the throwaway container")
        with contextlib.suppress(Exception):
            container.stop()


@contextlib.contextmanager
def initdb_server(name: str) -> Iterator[str]:
    try:
        cluster = Cluster.create(
            prefix=CLUSTER_PREFIX,
            parent=os.environ.get("RIVET_PG_TMPDIR") or None,
            os_user=os.environ.get("RIVET_PG_OS_USER", "postgres"),
            say=say,
        )
    except (ClusterError, OSError) as exc:  # OSError: RIVET_PG_TMPDIR is not a usable folder
        raise Unavailable(one_line(exc)) from None
    try:
        say(f"throwaway cluster listening on 127.0.0.1:{cluster.port}")
        yield cluster.url(name)
    finally:
        say(f"stopping and deleting the throwaway cluster in {cluster.root}")
        cluster.remove()


STARTERS = {"docker": docker_server, "initdb": initdb_server}


def enabled_sources() -> list[str]:
    raw = os.environ.get("RIVET_PG_DISCOVERY", "").strip()
    chosen = [item.strip() for item in raw.split(",")] if raw else list(SOURCES)
    unknown = [item for item in chosen if item not in SOURCES]
    if unknown:
        raise ValueError(f"RIVET_PG_DISCOVERY: unknown source {unknown[0]!r}; known: {SOURCES}")
    return chosen


@contextlib.contextmanager
def postgres_server(sources: list[str]) -> Iterator[tuple[str, str]]:
    """(source, url) of a server that answers; what was started is stopped on the way out."""
    tried: list[str] = []
    found = answering_url(tried) if "url" in sources else None
    if found:
        yield found
        return
    env_url = os.environ.get("DATABASE_URL", "")
    name = db_name(env_url) if is_postgres_url(env_url) else DEFAULT_DB_NAME
    for source in (s for s in SOURCES if s in sources and s in STARTERS):
        try:
            with STARTERS[source](name) as url:
                try:
                    probe(url)
                except Unavailable as exc:
                    raise Unavailable(f"started, but it does not answer: {exc}") from None
                yield source, url
                return
        except Unavailable as exc:
            tried.append(f"{source}: {exc}")
            say(tried[-1])
    tried += [f"{s}: not tried (RIVET_PG_DISCOVERY)" for s in SOURCES if s not in sources]
    raise NoPostgres(tried)


def effect_url_for(source: str, url: str) -> str:
    explicit = os.environ.get("EFFECT_DATABASE_URL", "")
    if source == "environment" and is_postgres_url(explicit):
        return explicit
    # A second database on the same server named after the first (rivet -> rivet_effect), so
    # that concurrent runs with different DATABASE_URL names do not share it.
    return with_db_name(url, f"{db_name(url)}_effect")


def run_command(command: list[str], env: dict[str, str]) -> int:
    """Run ``command``, passing SIGTERM and SIGHUP on; its exit code (128+N if a signal)."""
    proc = subprocess.Popen(command, env=env)

    def forward(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    handlers = {signum: forward for signum in (signal.SIGTERM, signal.SIGHUP)}
    # Ctrl-C reaches the whole foreground process group, the command included: it decides.
    handlers[signal.SIGINT] = signal.SIG_IGN
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def exit_on_signal(signum, frame):
    # SystemExit unwinds the with-blocks, so a half-started cluster is still removed.
    say(f"stopped by {signal.Signals(signum).name}")
    sys.exit(128 + signum)


def cmd_run(command: list[str]) -> int:
    if not command:
        say("nothing to run: scripts/find_postgres.py run -- COMMAND [ARG...]")
        return EXIT_USAGE
    try:
        sources = enabled_sources()
    except ValueError as exc:
        say(str(exc))
        return EXIT_USAGE
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, exit_on_signal)
    try:
        with postgres_server(sources) as (source, url):
            effect_url = effect_url_for(source, url)
            ensure_databases(url, [db_name(url), db_name(effect_url)])
            env = {**os.environ, "DATABASE_URL": url, "EFFECT_DATABASE_URL": effect_url}
            env["RIVET_PG_SOURCE"] = source
            say(f"source: {source}; DATABASE_URL={masked(url)}")
            say(f"EFFECT_DATABASE_URL={masked(effect_url)}")
            say(f"running: {shlex.join(command)}")
            code = run_command(command, env)
            say(f"command exited {code}")
            return code
    except NoPostgres as exc:
        say("no PostgreSQL server. What was tried:")
        print("".join(f"  - {note}\n" for note in exc.tried) + HELP_NO_POSTGRES, file=sys.stderr)
        return EXIT_NO_POSTGRES


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0 if argv else EXIT_USAGE
    if argv[0] != "run":
        say(f"unknown subcommand {argv[0]!r}; see --help")
        return EXIT_USAGE
    rest = argv[1:]
    return cmd_run(rest[1:] if rest[:1] == ["--"] else rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
