"""Several `general-agent serve` subprocesses sharing one store (docs/deployment.md): one SQLite state directory,
or one PostgreSQL database (`--store postgresql://...`). Each replica has its own replica id, workspace and log;
leases last `lease_ttl` seconds so a SIGKILLed replica's runs are repaired quickly."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.subprocess_server import ServerProcess, ServerProcesses, server_env


@dataclass
class Replicas:
    processes: ServerProcesses
    state_dir: Path
    store_url: str = ""  # "" = the SQLite file under state_dir
    # Short, so a SIGKILLed replica's runs are repaired quickly; long enough that a live replica renewing every
    # third of it on a loaded machine (event-loop stalls of a second seen at load 10 on 2 cores) keeps its lease.
    lease_ttl: float = 3.0

    def make(self, replica_id: str, extra: Mapping[str, str] | None = None) -> ServerProcess:
        """A replica not started yet, on the shared store."""
        root = self.processes.root
        env = {
            "GENERAL_AGENT_REPLICA_ID": replica_id,
            "GENERAL_AGENT_LEASE_TTL_SECONDS": str(self.lease_ttl),
            "GENERAL_AGENT_WORKSPACE_DIR": str(root / f"ws-{replica_id}"),
            **(extra or {}),
        }
        server = ServerProcess(
            state_dir=self.state_dir,
            env=server_env(self.processes.model_url, extra=env),
            log_path=root / f"server-{replica_id}.log",
            extra_args=["--store", self.store_url] if self.store_url else [],
        )
        self.processes.made.append(server)
        return server
