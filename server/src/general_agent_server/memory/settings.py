"""The memory settings (config/table.py declares each, with its default and help; docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("local", "everme", "off")
MAX_TOP_K = 20
MAX_BUDGET_CHARS = 20_000


@dataclass(frozen=True, kw_only=True, slots=True)
class MemorySettings:
    backend: str = "local"
    default_enabled: bool = False
    recall_top_k: int = 5
    recall_budget_chars: int = 4000
    recall_timeout: float = 2.0
    state_dir: Path = Path(".general-agent/state/memory")
    everme_env_file: str = ""
    everme_tenant: str = "default"
    everme_user_id: str = ""
    drain_timeout: float = 5.0
