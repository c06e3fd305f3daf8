"""Commands for a session whose run executes on another replica reach that replica through the store
(docs/architecture.md, "Commands across replicas").

The replica a command arrives at writes it as a PENDING row (store/port.py, CommandStore) and waits, holding the
session's command lock, so its own commands for the session still apply in order. The replica holding the
session's lease claims the rows of its sessions as soon as the store wakes it (store/wakeups.py: PostgreSQL's
NOTIFY of the new row) or else every `poll_seconds` (`replica_poll_seconds`), applies each as if it had arrived there,
under its own command lock, and writes the answer (the result, or the error to raise) back. While the command is
still PENDING and nobody holds a live lease any more (the run ended, or its owner died and the lease expired) the
sender withdraws it and applies it itself, after reading the session again (which repairs a dead owner's run).
A claimed command is always answered: at most once, by the replica that claimed it.

The command carries only what the receiving replica checked already: tenant, session, the command and its
idempotency key; the owner applies it as that tenant."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from general_agent_server.domain.errors import ErrorCode, FieldViolation, ServiceError, session_not_found
from general_agent_server.store.port import CommandStatus, SessionCommand, SessionStore
from general_agent_server.store.wakeups import WakeupSubscription, answer_topic, commands_topic

logger = logging.getLogger(__name__)

# How often an owner looks for commands and a sender for the answer when no wake-up came (a store read each,
# only while there is a lease held or an answer awaited); CommandRelay's `poll_seconds` replaces it.
POLL_SECONDS = 0.05

Body = dict[str, Any]
Execute = Callable[[SessionCommand, Body], Awaitable[Body]]


def error_body(error: ServiceError) -> Body:
    return {
        "error": {
            "code": error.code.value,
            "reason": error.reason,
            "message": error.message,
            "metadata": dict(error.metadata),
            "fields": [[v.field, v.description] for v in error.field_violations],
            "retry_after_seconds": error.retry_after_seconds,
        }
    }


def raise_error(body: Body) -> None:
    error = body.get("error")
    if isinstance(error, dict):
        raise ServiceError(
            ErrorCode(error["code"]),
            str(error["reason"]),
            str(error["message"]),
            metadata={str(k): str(v) for k, v in error["metadata"].items()},
            field_violations=tuple(FieldViolation(str(f), str(d)) for f, d in error["fields"]),
            retry_after_seconds=error["retry_after_seconds"],
        )


class CommandRelay:
    """See the module docstring. `holding` says whether this replica holds any lease now."""

    def __init__(
        self, store: SessionStore, *, owner: str, holding: Callable[[], bool], poll_seconds: float = POLL_SECONDS
    ) -> None:
        self._store = store
        self._poll = poll_seconds
        self._owner = owner
        self._holding = holding
        self._server: asyncio.Task[None] | None = None
        self._answering: set[asyncio.Task[None]] = set()

    async def send(self, tenant: str, session_id: str, body: Body) -> Body | None:
        """The owner's answer (its error raised); None when the command was withdrawn: no replica holds the
        session's lease any more, and the caller applies the command itself."""
        command_id = uuid.uuid4().hex
        command = SessionCommand(
            tenant=tenant, session_id=session_id, command_id=command_id, body_json=json.dumps(body)
        )
        # Subscribed before the row exists, so the answer's wake-up cannot come first.
        with contextlib.closing(self._store.subscribe(answer_topic(tenant, command_id))) as wakeup:
            await self._store.put_command(command)
            try:
                answer = await self._answer_of(tenant, session_id, command_id, wakeup)
            except asyncio.CancelledError:
                # The caller went away: a command nobody claimed yet is taken back (best effort).
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._store.withdraw_command(tenant, command_id))
                raise
        if answer is not None:
            raise_error(answer)
        return answer

    async def _answer_of(
        self, tenant: str, session_id: str, command_id: str, wakeup: WakeupSubscription
    ) -> Body | None:
        store = self._store
        while True:
            await wakeup.wait(self._poll)
            got = await store.get_command(tenant, command_id)
            if got is None:
                raise session_not_found(session_id)  # deleted with its session
            if got.status is CommandStatus.DONE:
                await store.delete_command(tenant, command_id)
                answer: Body = json.loads(got.result_json)
                return answer
            pending = got.status is CommandStatus.PENDING
            if (
                pending
                and not await store.lease_holder(tenant, session_id)
                and await store.withdraw_command(tenant, command_id)
            ):
                return None

    # ------------------------------------------------------------------ the owner's side
    def start(self, execute: Execute) -> None:
        self._server = asyncio.create_task(self._serve(execute), name="command-relay")

    async def close(self) -> None:
        if self._server is not None:
            self._server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._server
            self._server = None
        await asyncio.gather(*self._answering, return_exceptions=True)

    async def _serve(self, execute: Execute) -> None:
        with contextlib.closing(self._store.subscribe(commands_topic())) as wakeup:
            while True:
                await wakeup.wait(self._poll)
                await self._claim(execute)

    async def _claim(self, execute: Execute) -> None:
        if not self._holding():
            return
        try:
            claimed = await self._store.claim_commands(self._owner)
        except Exception:
            logger.exception("could not read relayed commands", extra={"category": "system"})
            return
        for command in claimed:
            task = asyncio.create_task(self._answer(execute, command), name=f"command-{command.command_id}")
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)

    async def _answer(self, execute: Execute, command: SessionCommand) -> None:
        try:
            result = await execute(command, json.loads(command.body_json))
        except ServiceError as error:
            result = error_body(error)
        except Exception:
            logger.exception("a relayed command failed", extra={"category": "system"})
            result = error_body(ServiceError(ErrorCode.INTERNAL, "INTERNAL", "the command failed on the run's replica"))
        try:
            await self._store.finish_command(command.tenant, command.command_id, json.dumps(result))
        except Exception:
            logger.exception("could not answer a relayed command", extra={"category": "system"})
