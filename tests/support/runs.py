"""A run held in the middle of its model call, for tests of what may happen while a session is busy (stop, cancel,
inject, busy policies, fork, idempotent retries, a crash): the fake model streams the first delta of its answer and
then waits until the test releases it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from general_agent.testing import FakeAnthropic, FakeAnthropicThread, HangReply, ReplyLike, TextReply
from tests.support.rpc import Stub, read_until, turn_call


def hang() -> HangReply:
    """A model reply that streams message_start, the block start, a ping and the first delta ("partial "), then
    waits for release(); released, the answer is "partial rest"."""
    return HangReply(after_events=4, reply=TextReply("partial rest", chunks=["partial ", "rest"]))


@dataclass
class HangingRun:
    """A StreamTurn whose model call is in flight. `seen` is what it streamed so far: run_started up to the first
    assistant_delta; the rest comes once `reply` is released (or the run is stopped)."""

    call: Any
    seen: list[Any]
    reply: HangReply

    @property
    def run_id(self) -> str:
        run_id: str = self.seen[0].run_id
        return run_id

    async def rest(self) -> list[Any]:
        """The events after `seen`, to the end of the stream."""
        return [response.event async for response in self.call]


async def start_hanging_run(
    stub: Stub,
    fake_model: FakeAnthropic | FakeAnthropicThread,
    session_id: str,
    text: str = "long task",
    *,
    then: Sequence[ReplyLike] = (),
    **request_fields: Any,
) -> HangingRun:
    """Starts a turn (`text`, plus any StreamTurnRequest fields) whose model call hangs after its first delta
    (`hang()`); `then` are the replies of the model calls after it. Returns once that delta has arrived."""
    reply = hang()
    fake_model.enqueue(reply, *then)
    call = turn_call(stub, session_id, text, **request_fields)
    return HangingRun(call, await read_until(call, "assistant_delta"), reply)
