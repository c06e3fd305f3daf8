"""What the replica executing a session's run does with a command another replica relayed to it through the store
(sessions/relay.py): the same as with the command arriving here, under the session's command lock."""

from __future__ import annotations

from general_agent_server.domain.codec import CONTENT_PARTS
from general_agent_server.domain.events import RunReason
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.idempotency import Idempotency, IdempotencyKeys
from general_agent_server.sessions.relay import Body
from general_agent_server.store.port import SessionCommand


class RelayedCommands:
    def __init__(self, cache: SessionCache, keys: IdempotencyKeys) -> None:
        self._cache = cache
        self._keys = keys

    async def execute(self, command: SessionCommand, body: Body) -> Body:
        async with self._cache.use(command.tenant, command.session_id) as session:
            kind = body["kind"]
            if kind == "stop":
                return {"run_id": await session.request_stop()}
            if kind == "clear_stop":
                return {"was_set": await session.clear_stop()}
            if kind == "cancel":
                return {"run_id": await session.stop(RunReason(body["reason"]), str(body["run_id"]))}
            if kind == "inject":
                request_id = str(body["request_id"])
                idem = Idempotency(request_id=request_id, body_hash=str(body["body_hash"])) if request_id else None
                keyed = self._keys.keyed(command.tenant, "InjectMessage", idem)
                return {"run_id": await session.inject(CONTENT_PARTS.loads(str(body["parts"])), keyed)}
        raise ValueError(f"unknown relayed command {kind!r}")
