"""A throwaway PostgreSQL cluster without pytest, shared by the tests' fixture (tests/support/postgres.py) and the
benchmarks (bench/scaleout.py): initdb in a temporary directory, a server on a free loopback port, torn down at
the end. The binaries come from PATH or Debian's /usr/lib/postgresql/<version>/bin (`.ci/run` installs the
`postgresql` package when neither has them). initdb refuses to run as root, so as root the cluster runs as a
dedicated unprivileged user. Every failure raises ClusterError; the fixture turns it into a test failure."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

CLUSTER_USER = "ga-pgtest"


class ClusterError(RuntimeError):
    """PostgreSQL is missing, or initdb / pg_ctl failed."""


def find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_USERADD_EXISTS = 9  # useradd's exit status when the user is already there


def _as_cluster_user() -> list[str]:
    """The command prefix that runs a program as a non-root user (nothing when not root). The user is created once
    per machine; test workers starting clusters at the same moment take a lock for it, and one that still meets
    the user made meanwhile (another process without the lock) takes it as made."""
    if os.geteuid() != 0:
        return []
    with open(Path(tempfile.gettempdir()) / f"{CLUSTER_USER}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(CLUSTER_USER)
        except KeyError:
            created = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", CLUSTER_USER],
                capture_output=True,
                text=True,
                check=False,
            )
            if created.returncode not in (0, _USERADD_EXISTS):
                raise ClusterError(f"useradd {CLUSTER_USER} failed ({created.returncode}): {created.stderr}") from None
    return ["runuser", "-u", CLUSTER_USER, "--"]


class Cluster:
    def __init__(self, root: Path) -> None:
        missing = [n for n in ("initdb", "pg_ctl", "postgres") if find_binary(n) is None]
        if missing:
            raise ClusterError(
                f"PostgreSQL binaries {missing} not found on PATH or under /usr/lib/postgresql/*/bin; "
                "install PostgreSQL (`.ci/run` installs Debian's postgresql package)"
            )
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.prefix = _as_cluster_user()
        if self.prefix:
            shutil.chown(root, user=CLUSTER_USER)
            root.chmod(0o700)

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self.prefix, *args], capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            raise ClusterError(f"{args[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def start(self) -> None:
        initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        assert initdb is not None
        assert pg_ctl is not None
        self._run(initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "--locale=C", "-E", "UTF8")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run(pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")

    def stop(self) -> None:
        pg_ctl = find_binary("pg_ctl")
        if pg_ctl is not None and self.data.exists():
            subprocess.run(
                [*self.prefix, pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                check=False,
                timeout=60,
            )

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def postmaster_pid(self) -> int:
        """The server's main process (its backends are its children), from postmaster.pid."""
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    """A started cluster in a temporary directory, stopped and removed on exit."""
    root = Path(tempfile.mkdtemp(prefix="ga-pg-"))
    root.chmod(0o755)
    try:
        cluster = Cluster(root)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
