"""A throwaway PostgreSQL cluster of one's own: initdb, pg_ctl start / restart / stop, removal.

Standard library only: ``scripts/find_postgres.py`` (the tests' server when nothing else
answers), the chaos harness's ``db-restart`` fault (a queue database it may restart without
touching anyone else's server) and its ``failover`` fault (a primary and a streaming standby made
with ``pg_basebackup -R``; the primary is SIGKILLed and the standby promoted) all use it.

The cluster lives in a new folder ``<parent>/<prefix>XXXX`` (``data/``, ``postgres.log``, the
Unix socket, and ``owner.pid``: the process that made it), listens on a free port on 127.0.0.1
with trust auth, superuser ``postgres``, and is tuned for a throwaway (no fsync). initdb refuses
to run as root, so as root every initdb / pg_ctl runs as the OS user ``postgres`` (or the one
named). A cluster whose owner process died before it could clean up is stale:
``remove_stale_clusters`` stops and deletes it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

SERVER_OPTIONS = (
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
)
PORT_ATTEMPTS = 3
START_TIMEOUT_SECS = 60
CRASH_TIMEOUT_SECS = 10


class ClusterError(Exception):
    """The cluster could not be made, started or restarted; the message says why."""


def pg_bindir() -> Path:
    """The folder holding initdb and pg_ctl: ``pg_config --bindir``, else the usual places."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        result = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=False
        )
        if result.returncode == 0 and result.stdout.strip():
            candidates.append(Path(result.stdout.strip()))
    # Debian's pg_config (libpq-dev) may name /usr/bin, where initdb is not.
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for tool in ("initdb", "pg_ctl"):
        found = shutil.which(tool)
        if found:
            candidates.append(Path(found).parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    if not pg_config:
        raise ClusterError("no pg_config on PATH, and no initdb/pg_ctl found")
    raise ClusterError(f"no initdb and pg_ctl next to pg_config's bindir ({candidates[:1]})")


def cluster_owner(os_user: str = "postgres") -> pwd.struct_passwd | None:
    """The OS user to run initdb/pg_ctl as: None means ourselves (we are not root)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(os_user)
    except KeyError:
        raise ClusterError(
            f"running as root, and initdb refuses root, but there is no OS user {os_user!r} to "
            "run it as (set RIVET_PG_OS_USER)"
        ) from None


def as_owner(owner: pwd.struct_passwd | None, command: list[str]) -> list[str]:
    if owner is None:
        return command
    if shutil.which("runuser"):
        return ["runuser", "-u", owner.pw_name, "--", *command]
    return ["su", owner.pw_name, "-s", "/bin/sh", "-c", shlex.join(command)]


def default_parent() -> str:
    # As root the usual TMPDIR may be private to root; the postgres user must reach the cluster.
    return "/tmp" if os.geteuid() == 0 else tempfile.gettempdir()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0 delivers nothing: it only asks whether the pid exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A killed process stays a zombie until its (new) parent reaps it: that is dead too.
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] not in ("Z", "X")
    return True


class Cluster:
    """One throwaway cluster in ``root``; ``create`` makes and starts one, ``remove`` ends it."""

    def __init__(
        self,
        root: Path,
        *,
        bindir: Path,
        owner: pwd.struct_passwd | None,
        say: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.root = root
        self.bindir = bindir
        self.owner = owner
        self.say = say
        self.data = root / "data"
        self.log = root / "postgres.log"
        self.port: int | None = None
        self.options = ""
        """Server options (``-c name=value ...``) beside SERVER_OPTIONS, for every start."""

    @classmethod
    def create(
        cls,
        *,
        prefix: str,
        parent: str | None = None,
        os_user: str = "postgres",
        say: Callable[[str], None] = lambda _: None,
        options: str = "",
    ) -> Cluster:
        """initdb a new cluster under ``parent`` and start it on a free port (``options``:
        server options beside SERVER_OPTIONS, a later ``-c`` of the same name winning)."""
        cluster = cls._new(prefix, parent, os_user, say, options)
        try:
            cluster._initdb()
            cluster._start()
        except BaseException:
            cluster.remove()
            raise
        return cluster

    @classmethod
    def standby_of(
        cls,
        primary: Cluster,
        *,
        prefix: str,
        name: str,
        parent: str | None = None,
        os_user: str = "postgres",
        say: Callable[[str], None] = lambda _: None,
        options: str = "",
    ) -> Cluster:
        """A streaming standby of ``primary``: ``pg_basebackup -R`` into a new folder (the
        replication slot ``name``, created by the copy), started on a free port with
        ``cluster_name`` ``name``, which its WAL receiver reports as its application_name (what
        the primary's ``synchronous_standby_names`` matches)."""
        options = f"-c cluster_name={name} -c hot_standby=on {options}".strip()
        standby = cls._new(prefix, parent, os_user, say, options)
        try:
            who = f" as OS user {standby.owner.pw_name!r}" if standby.owner else ""
            say(
                f"copying the primary (127.0.0.1:{primary.port}) with "
                f"{standby.bindir}/pg_basebackup -R{who} into {standby.root}"
            )
            standby._run(
                [str(standby.bindir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port),
                 "-U", "postgres", "-D", str(standby.data), "-R", "-X", "stream", "-C", "-S", name,
                 "-c", "fast", "--no-sync"],
                "pg_basebackup",
            )  # fmt: skip
            standby._start()
        except BaseException:
            standby.remove()
            raise
        return standby

    @classmethod
    def _new(
        cls,
        prefix: str,
        parent: str | None,
        os_user: str,
        say: Callable[[str], None],
        options: str,
    ) -> Cluster:
        bindir, owner = pg_bindir(), cluster_owner(os_user)
        parent = parent or default_parent()
        remove_stale_clusters(prefix, parent, bindir=bindir, owner=owner, say=say)
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        (root / "owner.pid").write_text(f"{os.getpid()}\n")
        if owner is not None:
            os.chown(root, owner.pw_uid, owner.pw_gid)
        cluster = cls(root, bindir=bindir, owner=owner, say=say)
        cluster.options = options
        return cluster

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{quote(dbname, safe='')}"

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid (first line of postmaster.pid), None when stopped."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def restart(self, mode: str = "fast") -> None:
        """Shut down (``fast``: roll back open transactions, close every session), then start
        with the same options; returns once the new postmaster accepts connections."""
        wait = ("-w", "-t", str(START_TIMEOUT_SECS))
        self._pg_ctl("-l", str(self.log), "-m", mode, *wait, "restart")

    def promote(self) -> None:
        """A standby leaves recovery and takes writes; returns once it has (``pg_ctl promote
        -w``)."""
        self._pg_ctl("-w", "-t", str(START_TIMEOUT_SECS), "promote")

    def crash(self) -> dict[str, int | None]:
        """SIGKILL the postmaster and every server process it started, at once, as a host that
        dies would end them: nothing is shut down, flushed or sent after it. Returns once the
        postmaster has exited, with its pid and how many of its processes were signalled
        (through pidfds opened before the first signal, so a pid reused meanwhile is never
        hit)."""
        pid = self.postmaster_pid()
        if pid is None or not pid_alive(pid):
            raise ClusterError(f"no postmaster is running in {self.data}")
        targets = [pid, *children(pid)]
        fds = []
        for target in targets:
            with contextlib.suppress(OSError):
                fds.append(os.pidfd_open(target))
        signalled = 0
        try:
            for fd in fds:  # the postmaster first: it restarts no child once it is gone
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    signalled += 1
            if fds:  # a pidfd turns readable once its process has exited
                select.select(fds[:1], [], [], CRASH_TIMEOUT_SECS)
        finally:
            for fd in fds:
                os.close(fd)
        return {"postmaster": pid, "processes": signalled}

    def stop(self) -> None:
        """Stop the server (fast, then immediate); a postmaster that will not stop is killed."""
        if not (self.data / "postmaster.pid").exists():
            return
        for mode in ("fast", "immediate"):
            try:
                self._pg_ctl("-m", mode, "-w", "-t", "30", "stop")
                return
            except ClusterError:
                continue
        pid = self.postmaster_pid()
        if pid is not None and pid_alive(pid):
            _kill_postmaster(pid, self.data)
            self.say(f"postmaster {pid} did not stop; killed it")

    def remove(self) -> None:
        """Stop the server and delete the cluster's folder."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _initdb(self) -> None:
        who = f" as OS user {self.owner.pw_name!r}" if self.owner else ""
        self.say(f"starting a throwaway cluster with {self.bindir}/initdb{who} in {self.root}")
        self._run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--no-locale", "--no-sync"],
            "initdb",
        )  # fmt: skip

    def _start(self) -> None:
        for attempt in range(PORT_ATTEMPTS):  # another process may take the free port first
            port = free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {port} -k {shlex.quote(str(self.root))} "
                + SERVER_OPTIONS
                + (f" {self.options}" if self.options else "")
            )
            try:
                self._pg_ctl("-l", str(self.log), "-w", "-t", str(START_TIMEOUT_SECS),
                             "-o", options, "start")  # fmt: skip
            except ClusterError:
                if attempt == PORT_ATTEMPTS - 1:
                    raise
                continue
            self.port = port
            return

    def _pg_ctl(self, *args: str) -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), *args], "pg_ctl " + args[-1])

    def _run(self, command: list[str], what: str) -> None:
        # Output goes to a file, never a pipe: a postmaster that pg_ctl starts inherits it and
        # lives on, so reading a pipe to its end would wait for the server to stop.
        out = self.root / "pg_ctl.out"
        with out.open("w+b") as sink:
            code = subprocess.call(
                as_owner(self.owner, command),
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
            sink.seek(0)
            output = sink.read().decode(errors="replace").strip()[-2000:]
        if code != 0:
            raise ClusterError(f"{what} exited {code}: {output}\n{self.log_tail()}".rstrip())


def remove_stale_clusters(
    prefix: str,
    parent: str,
    *,
    bindir: Path,
    owner: pwd.struct_passwd | None,
    say: Callable[[str], None] = lambda _: None,
) -> None:
    """Clusters whose maker died (SIGKILL) before it could clean up: stop and delete them."""
    for path in glob.glob(os.path.join(parent, prefix + "*")):
        root = Path(path)
        try:
            owner_pid = int((root / "owner.pid").read_text().strip())
        except (OSError, ValueError):
            continue
        if owner_pid != os.getpid() and not pid_alive(owner_pid):
            say(f"removing a stale throwaway cluster {root} (its run, pid {owner_pid}, is gone)")
            Cluster(root, bindir=bindir, owner=owner, say=say).remove()


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (read from /proc)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(stat).read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid:
                found.append(int(stat.split("/")[2]))
    return found


def _kill_postmaster(pid: int, data: Path) -> None:
    """SIGKILL through a pidfd, after checking the pid still names this cluster's postmaster."""
    if not hasattr(os, "pidfd_open"):
        return
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        # The pidfd pins one process; only signal it if that process is our postmaster.
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        if str(data).encode() in cmdline or b"postgres" in cmdline:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)
