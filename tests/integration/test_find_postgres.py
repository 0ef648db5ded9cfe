"""scripts/find_postgres.py run for real: the server that answers, a throwaway cluster, nothing.

Each test runs the script as ``make test`` does, with a small Python command in place of
pytest that reports what it was given. The throwaway cluster is made in a folder of the test's
own (``RIVET_PG_TMPDIR``), so the test can see it appear and go.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from chaos_project.chaos import pgcluster
from chaos_project.kit.services import database_url

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find_postgres.py"
CLOSED_URL = "postgres://postgres@127.0.0.1:1/rivet_nowhere"

# Connects to the DATABASE_URL it is given, then prints what it saw as one JSON line.
REPORT = """
import json, os, sys
import psycopg
from pathlib import Path
url = os.environ["DATABASE_URL"]
with psycopg.connect(url, connect_timeout=5) as conn:
    database = conn.execute("SELECT current_database()").fetchone()[0]
folder = os.environ.get("RIVET_PG_TMPDIR")
print(json.dumps({
    "url": url,
    "effect_url": os.environ["EFFECT_DATABASE_URL"],
    "source": os.environ["RIVET_PG_SOURCE"],
    "database": database,
    "clusters": sorted(p.name for p in Path(folder).iterdir()) if folder else [],
}))
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def script_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RIVET_PG_", "DATABASE_URL"))}
    env.pop("EFFECT_DATABASE_URL", None)
    env["RIVET_PG_DISCOVERY_SKIP_DOTENV"] = "1"  # the committed .env must not answer instead
    env.update(values)
    return env


def find_postgres(env: dict[str, str], *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "run", "--", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def report(done: subprocess.CompletedProcess) -> dict:
    return json.loads(done.stdout.strip().splitlines()[-1])


def answers(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.OperationalError:
        return False
    return True


@pytest.fixture
def cluster_parent() -> Iterator[Path]:
    """A folder the throwaway cluster may be made in; as root, its OS user must reach it."""
    folder = Path(tempfile.mkdtemp(prefix="rivet-find-pg-test-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    # A cluster the script failed to remove (its run is over, so it is stale): stop it here.
    bindir, owner = pgcluster.pg_bindir(), pgcluster.cluster_owner()
    pgcluster.remove_stale_clusters("rivet-pg-", str(folder), bindir=bindir, owner=owner)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_database_url_that_answers_is_chosen_and_the_exit_code_is_the_commands(
    postgres_server,
):
    url = database_url("default")
    effect_url = url  # named outright: kept as it is, not derived (and nothing new is made)
    env = script_env(DATABASE_URL=url, EFFECT_DATABASE_URL=effect_url, RIVET_PG_DISCOVERY="url")
    done = find_postgres(env, sys.executable, "-c", REPORT, "7")
    assert done.returncode == 7, done.stderr
    seen = report(done)
    assert (seen["source"], seen["url"], seen["effect_url"]) == ("environment", url, effect_url)
    assert f"PostgreSQL {postgres_server} answers at DATABASE_URL from environment" in done.stderr


def test_a_url_that_does_not_answer_falls_through_to_a_throwaway_cluster_removed_after(
    cluster_parent,
):
    env = script_env(
        DATABASE_URL=CLOSED_URL,
        RIVET_PG_DISCOVERY="url,initdb",
        RIVET_PG_TMPDIR=str(cluster_parent),
    )
    done = find_postgres(env, sys.executable, "-c", REPORT)
    assert done.returncode == 0, done.stderr
    assert f"url: DATABASE_URL from environment ({CLOSED_URL}): connection" in done.stderr
    seen = report(done)
    assert seen["source"] == "initdb"
    assert seen["database"] == "rivet_nowhere"  # the name DATABASE_URL asked for
    assert seen["effect_url"] == seen["url"] + "_effect"
    assert len(seen["clusters"]) == 1 and seen["clusters"][0].startswith("rivet-pg-")
    # Stopped and deleted once the command is done.
    assert list(cluster_parent.iterdir()) == []
    assert not answers(seen["url"])


def test_sigterm_stops_the_command_and_removes_the_cluster(cluster_parent, tmp_path):
    ready = tmp_path / "ready"
    waiting = (
        "import pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text('x'); time.sleep(120)"
    )
    env = script_env(RIVET_PG_DISCOVERY="initdb", RIVET_PG_TMPDIR=str(cluster_parent))
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "run", "--", sys.executable, "-c", waiting, str(ready)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.1)
        assert len(list(cluster_parent.iterdir())) == 1
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "stopping and deleting the throwaway cluster" in stderr
    assert list(cluster_parent.iterdir()) == []


def test_with_nothing_to_be_had_it_exits_3_naming_every_source_it_tried(tmp_path):
    ran = tmp_path / "ran"
    env = script_env(
        DATABASE_URL=CLOSED_URL,
        DOCKER_HOST=f"unix://{tmp_path / 'no-docker.sock'}",  # no engine, whatever the machine
        RIVET_PG_TMPDIR=str(tmp_path / "no-such-folder"),  # so initdb cannot make a cluster
    )
    done = find_postgres(env, sys.executable, "-c", f"open({str(ran)!r}, 'w')")
    assert done.returncode == 3
    assert not ran.exists(), "the command must not run without a server"
    tried = done.stderr.split("What was tried:", 1)[1]
    assert f"- url: DATABASE_URL from environment ({CLOSED_URL}): connection" in tried
    assert "- docker: no Docker engine answers" in tried
    assert "- initdb: " in tried
    assert "rivet's tests need a PostgreSQL server" in tried
    assert "docker compose up -d rivet-db" in tried
