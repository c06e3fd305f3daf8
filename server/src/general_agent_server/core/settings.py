"""Settings the core needs (a slice of the server's settings, free of transport concerns)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class CoreSettings:
    default_model_ref: str = "anthropic/claude-sonnet-4-6"
    max_tokens_cap: int = 64_000
    replica_id: str = "local"
    subscriber_buffer: int = 4096
    sequence_block: int = 4096
    idempotency_ttl_seconds: float = 24 * 3600
    max_image_bytes: int = 5 * 1024 * 1024
    max_message_bytes: int = 20 * 1024 * 1024
    max_history_page_bytes: int = 4 * 1024 * 1024
    shutdown_grace_seconds: float = 10.0
    event_replay_batch: int = 500
    max_idle_actors: int = 1000
