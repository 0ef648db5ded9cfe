#!/usr/bin/env python3
"""A throwaway Patroni cluster of two PostgreSQL nodes in synchronous mode, on one machine.

    python scripts/patroni_pair.py demo     # start it, SIGKILL the leader's host, time the failover
    python scripts/patroni_pair.py config   # print the node configuration it writes

One etcd (``etcd-server``) and two ``patroni`` processes (Debian: ``apt-get install patroni
etcd-server``), each node's PostgreSQL from ``pg_config --bindir``, everything in a new folder
under /tmp, on free ports of 127.0.0.1, removed at the end. As root, etcd and Patroni run as the OS
user ``postgres`` (initdb refuses root). ``synchronous_mode: true`` makes Patroni keep the
replica in ``synchronous_standby_names`` and promote only it; docs/failover.md explains the
settings. Clients reach whichever node leads through libpq's multi-host URL (``url``).

Killing a node's host means SIGKILL of its Patroni process, its postmaster and every server
process the postmaster started, through pidfds: Patroni cannot restart its PostgreSQL or give
up its leader key, so the other node takes over only once the key's ``ttl`` ran out.

Standard library only (it reuses ``chaos_project.chaos.pgcluster``'s helpers), so
``tests/acceptance/test_patroni_failover.py`` and a shell use the same code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from chaos_project.chaos.pgcluster import (  # noqa: E402 (stdlib only)
    as_owner,
    children,
    cluster_owner,
    free_port,
    pg_bindir,
)

SCOPE = "rivet"
#: Seconds the leader key lives without its holder renewing it: what a dead leader costs, at
#: least, before the standby is promoted. Patroni requires loop_wait + 2 * retry_timeout <= ttl.
TTL = 10
LOOP_WAIT = 1
RETRY_TIMEOUT = 4
#: A node bootstraps (initdb) before it leads: on a loaded two-core machine that took over 90 s.
START_TIMEOUT_SECS = 300.0

NODE_CONFIG = """\
scope: {scope}
name: {name}
restapi:
  listen: 127.0.0.1:{rest_port}
  connect_address: 127.0.0.1:{rest_port}
etcd3:
  hosts: 127.0.0.1:{etcd_port}
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry_timeout}
    maximum_lag_on_failover: 0
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      parameters:
        synchronous_commit: "on"
        wal_level: replica
        max_wal_senders: 5
        max_replication_slots: 5
        hot_standby: "on"
  initdb:
    - encoding: UTF8
    - no-locale
  pg_hba:
    - local all all trust
    - host replication postgres 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg_port}
  connect_address: 127.0.0.1:{pg_port}
  data_dir: {root}/data
  bin_dir: {bindir}
  pgpass: {root}/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
  parameters:
    unix_socket_directories: {root}
"""


class PatroniError(Exception):
    """The cluster could not be started or did not fail over; the message says why."""


class Process:
    """A process of the pair, started as the cluster's OS owner, with a pidfd of its own."""

    def __init__(self, name: str, command: list[str], log: Path, owner) -> None:
        self.name = name
        self.log = log
        # Patroni is not rivet's code: a test run's warnings-as-errors must not reach it.
        env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
        with log.open("ab") as out:
            self.popen = subprocess.Popen(
                as_owner(owner, command),
                env=env,
                # The owner may not enter the caller's directory (a checkout under a mode-700
                # mktemp folder): Patroni then fails to start PostgreSQL, bootstrapping forever.
                cwd=log.parent,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pidfd = os.pidfd_open(self.popen.pid)
        self.wrapped = owner is not None

    def main_pid(self) -> int:
        """The program's own pid: runuser's child when started through runuser."""
        below = children(self.popen.pid) if self.wrapped else []
        return below[0] if below else self.popen.pid

    def signal(self, signum: int) -> None:
        """Signal the program itself, through a pidfd; runuser, its parent, then reaps it and
        exits with it (signalling runuser instead would orphan the program)."""
        with contextlib.suppress(OSError):
            fd = os.pidfd_open(self.main_pid())
            try:
                signal.pidfd_send_signal(fd, signum)
            finally:
                os.close(fd)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it has not ended within ``timeout`` seconds."""
        if self.popen.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                self.popen.wait(10)
        os.close(self.pidfd)
        self.pidfd = -1

    def tail(self, chars: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Node:
    def __init__(self, name: str, root: Path, rest_port: int, pg_port: int) -> None:
        self.name = name
        self.root = root
        self.rest_port = rest_port
        self.pg_port = pg_port
        self.patroni: Process | None = None

    def config(self, etcd_port: int, bindir: Path) -> str:
        return NODE_CONFIG.format(
            scope=SCOPE,
            name=self.name,
            rest_port=self.rest_port,
            etcd_port=etcd_port,
            ttl=TTL,
            loop_wait=LOOP_WAIT,
            retry_timeout=RETRY_TIMEOUT,
            pg_port=self.pg_port,
            root=self.root,
            bindir=bindir,
        )

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.root / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


class PatroniPair:
    """etcd and two Patroni nodes in a new folder; ``start``, then ``close`` (always)."""

    def __init__(self, say=print) -> None:
        self.say = say
        for tool in ("patroni", "etcd"):
            if shutil.which(tool) is None:
                raise PatroniError(
                    f"no {tool} on PATH: apt-get install patroni etcd-server (Debian)"
                )
        self.bindir = pg_bindir()
        self.owner = cluster_owner()
        self.root = Path(tempfile.mkdtemp(prefix="rivet-patroni-", dir="/tmp"))
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.nodes = [
            Node(f"node{n}", self.root / f"node{n}", free_port(), free_port()) for n in (1, 2)
        ]
        self.etcd: Process | None = None

    def url(self, dbname: str = "postgres") -> str:
        hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in self.nodes)
        return f"postgres://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def start(self) -> None:
        """etcd, then node1 (it bootstraps and leads), then node2 (its synchronous standby)."""
        for node in self.nodes:
            node.root.mkdir()
            (node.root / "patroni.yml").write_text(node.config(self.etcd_port, self.bindir))
        if self.owner is not None:
            for path in [self.root, *self.root.rglob("*")]:
                os.chown(path, self.owner.pw_uid, self.owner.pw_gid)
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        self.etcd = Process(
            "etcd",
            ["etcd", "--name", "etcd1", "--data-dir", str(self.root / "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"etcd1={peer}"],
            self.root / "etcd.log",
            self.owner,
        )  # fmt: skip
        self._wait(lambda: _get_json(f"{client}/health", method="GET"), "etcd answers")
        first, second = self.nodes
        self._start_node(first)
        self._wait(lambda: self.roles().get(first.name) == "leader", f"{first.name} leads")
        self._start_node(second)
        self._wait(
            lambda: (
                self.roles().get(second.name) == "sync_standby"
                and self.states().get(second.name) in ("running", "streaming")
            ),
            f"{second.name} is the synchronous standby",
        )
        self.say(
            f"patroni: {first.name} leads, {second.name} is its synchronous standby; {self.url()}"
        )

    def _start_node(self, node: Node) -> None:
        node.patroni = Process(
            node.name,
            ["patroni", str(node.root / "patroni.yml")],
            node.root / "patroni.log",
            self.owner,
        )

    def cluster(self) -> list[dict]:
        """The members as a live node's REST API reports them (``/cluster``)."""
        for node in self.nodes:
            if node.patroni is None or node.patroni.popen.poll() is not None:
                continue
            found = _get_json(f"http://127.0.0.1:{node.rest_port}/cluster")
            if found is not None:
                return found.get("members", [])
        return []

    def roles(self) -> dict[str, str]:
        return {m["name"]: m.get("role", "") for m in self.cluster()}

    def states(self) -> dict[str, str]:
        return {m["name"]: m.get("state", "") for m in self.cluster()}

    def leader(self) -> Node:
        roles = self.roles()
        for node in self.nodes:
            if roles.get(node.name) == "leader":
                return node
        raise PatroniError(f"no leader: {roles}")

    def kill_host(self, node: Node) -> int:
        """SIGKILL the node's Patroni, its postmaster and every server process, at once (a host
        that dies). Returns how many processes were signalled."""
        targets = []
        if node.patroni is not None:
            targets.append(node.patroni.main_pid())
        postmaster = node.postmaster_pid()
        if postmaster is not None:
            targets += [postmaster, *children(postmaster)]
        fds = []
        for pid in targets:
            with contextlib.suppress(OSError):
                fds.append(os.pidfd_open(pid))
        signalled = 0
        for fd in fds:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                signalled += 1
            os.close(fd)
        if node.patroni is not None:
            node.patroni.popen.wait(10)
        return signalled

    def close(self) -> None:
        """Stop every Patroni (each stops its PostgreSQL), then etcd; delete the folder."""
        for node in self.nodes:
            if node.patroni is not None and node.patroni.pidfd >= 0:
                node.patroni.stop()
        for node in self.nodes:  # a killed node's postmaster may have outlived its Patroni
            postmaster = node.postmaster_pid()
            if postmaster is not None and Path(f"/proc/{postmaster}").exists():
                subprocess.call(
                    as_owner(self.owner, [str(self.bindir / "pg_ctl"), "-D",
                                          str(node.root / "data"), "-m", "immediate", "stop"]),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
        if self.etcd is not None and self.etcd.pidfd >= 0:
            self.etcd.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _wait(self, ready, what: str, timeout: float = START_TIMEOUT_SECS) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if ready():
                    return
            time.sleep(0.2)
        logs = "\n".join(
            f"--- {p.name}\n{p.tail()}"
            for p in [self.etcd, *(n.patroni for n in self.nodes)]
            if p is not None
        )
        raise PatroniError(f"timed out after {timeout:g} s waiting until {what}\n{logs}")


def _get_json(url: str, method: str = "GET") -> dict | None:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:
            return json.loads(answer.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def writable_after(url: str, since: float, timeout: float = 60.0) -> float:
    """Seconds from ``since`` (monotonic) until ``url`` takes a write (psql, libpq's own)."""
    psql = shutil.which("psql") or str(pg_bindir() / "psql")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(
            [psql, url, "-Atc", "CREATE TEMP TABLE probe (n int)"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PGCONNECT_TIMEOUT": "2"},
        )
        if done.returncode == 0:
            return time.monotonic() - since
        time.sleep(0.1)
    raise PatroniError(f"{url} took no write within {timeout:g} s")


def demo() -> int:
    pair = PatroniPair()
    try:
        pair.start()
        leader = pair.leader()
        started = time.monotonic()
        killed = pair.kill_host(leader)
        print(f"SIGKILL of {leader.name}'s host: {killed} processes (Patroni, postmaster, server)")
        secs = writable_after(pair.url(), started)
        print(f"{pair.url()} took writes again after {secs:.1f} s; now: {pair.roles()}")
    finally:
        pair.close()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("demo", "config"))
    args = parser.parse_args(argv)
    if args.what == "config":
        node = Node("node1", Path("/var/lib/rivet-patroni/node1"), 8008, 5432)
        print(node.config(2379, pg_bindir()), end="")
        return 0
    try:
        return demo()
    except PatroniError as exc:
        print(f"patroni_pair: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
