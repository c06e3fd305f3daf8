"""Building the memory service from the settings (docs/memory.md, "Configuration"): the backend the operator chose,
its state under `<state_dir>/memory/` (directory 0700, files 0600), and the outbox in front of it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import httpx

from general_agent_server.config.checks import ConfigError
from general_agent_server.memory.everme.backend import EverMeBackend
from general_agent_server.memory.everme.config import EverMeConfig, EverMeConfigError, env_file_path, load_config
from general_agent_server.memory.local import LocalMemoryBackend
from general_agent_server.memory.outbox import Outbox, Retry
from general_agent_server.memory.port import MemoryBackend
from general_agent_server.memory.service import MemoryService
from general_agent_server.memory.settings import MemorySettings

LOCAL_FILE = "memory.db"
OUTBOX_FILE = "outbox.db"


def local_backend(state_dir: Path) -> LocalMemoryBackend:
    return LocalMemoryBackend(state_dir / LOCAL_FILE)


def everme_config(settings: MemorySettings, environ: Mapping[str, str]) -> EverMeConfig:
    try:
        return load_config(environ, env_file_path(settings.everme_env_file, environ))
    except EverMeConfigError as exc:
        raise ConfigError(str(exc)) from None


def build_memory(
    settings: MemorySettings,
    environ: Mapping[str, str],
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    retry: Retry | None = None,
) -> MemoryService | None:
    """The memory service, or None with `memory_backend = off`."""
    backend: MemoryBackend
    flush_every = 0
    if settings.backend == "off":
        return None
    if settings.backend == "everme":
        config = everme_config(settings, environ)
        backend = EverMeBackend(config, transport=transport)
        flush_every = config.flush_every_turns
    else:
        backend = local_backend(settings.state_dir)
    outbox = Outbox(settings.state_dir / OUTBOX_FILE, backend, retry=retry or Retry(), flush_every_turns=flush_every)
    return MemoryService(settings, backend, outbox)
