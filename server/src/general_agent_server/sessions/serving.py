"""Whether the server takes new work: closed once shutdown begins, after which new turns and session loads
answer UNAVAILABLE `SHUTTING_DOWN` so clients retry elsewhere or later."""

from __future__ import annotations

from general_agent_server.domain.errors import ErrorCode, ServiceError


class ServingGate:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def check(self) -> None:
        if self.closed:
            raise ServiceError(
                ErrorCode.UNAVAILABLE, "SHUTTING_DOWN", "the server is shutting down", retry_after_seconds=1.0
            )
