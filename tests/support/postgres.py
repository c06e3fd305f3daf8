"""A throwaway PostgreSQL cluster for the tests (no mock): initdb in a temporary directory, a server on a free
loopback port, torn down at the end of the session. The binaries come from PATH or Debian's
/usr/lib/postgresql/<version>/bin (`.ci/run` installs the `postgresql` package when neither has them). initdb
refuses to run as root, so as root the cluster runs as a dedicated unprivileged user. A missing PostgreSQL fails
the tests that need it, loudly: it never skips them."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

CLUSTER_USER = "ga-pgtest"


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


def _as_cluster_user() -> list[str]:
    """The command prefix that runs a program as a non-root user (nothing when not root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(CLUSTER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", CLUSTER_USER], check=True
        )
    return ["runuser", "-u", CLUSTER_USER, "--"]


class Cluster:
    def __init__(self, root: Path) -> None:
        missing = [n for n in ("initdb", "pg_ctl", "postgres") if find_binary(n) is None]
        if missing:
            pytest.fail(
                f"PostgreSQL binaries {missing} not found on PATH or under /usr/lib/postgresql/*/bin; "
                "install PostgreSQL (`.ci/run` installs Debian's postgresql package)",
                pytrace=False,
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
            pytest.fail(f"{args[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}", pytrace=False)

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


def fresh_database(url: str, prefix: str) -> str:
    """The URL of a new, empty database on the cluster of `url` (one per test keeps their data apart)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """`postgresql://postgres@127.0.0.1:<port>/postgres` of a cluster started for this test session."""
    root = Path(tempfile.mkdtemp(prefix="ga-pg-"))
    root.chmod(0o755)
    cluster = Cluster(root)
    try:
        cluster.start()
        yield cluster.url
    finally:
        cluster.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
