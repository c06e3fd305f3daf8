"""File checkpoints through real turns and the RPCs (docs/tools.md, checkpoints): write → edit → apply_patch each record
a checkpoint; restoring the oldest after a server restart puts every file back exactly as it was; a failed mutation
records nothing; the per-session bounds drop the oldest; unknown ids are CHECKPOINT_NOT_FOUND; a restore during a run is
SESSION_BUSY."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from general_agent.testing import FakeAnthropic, HangReply, Reply, TextReply, ToolUseBlock
from general_agent.v1 import checkpoint_pb2, session_pb2
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.events import last_of
from tests.support.rpc import Stub, connect, create_session, read_until, rpc_error, stream_turn, text_input

PATCH = """*** Begin Patch
*** Update File: notes.txt
@@
 alpha
-beta edited
+beta patched
*** Add File: added.txt
+brand new
*** Delete File: old.txt
*** End Patch"""


def call(call_id: str, name: str, **arguments: Any) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name=name, input=arguments)])


async def coding_session(stub: Stub) -> str:
    session = await create_session(stub, identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING))
    return session.identity.session_id


async def tool_turn(stub: Stub, fake_model: FakeAnthropic, sid: str, reply: Reply) -> list[Any]:
    fake_model.enqueue(reply, TextReply("done"))
    return await stream_turn(stub, sid, "change files")


async def checkpoints(stub: Stub, sid: str) -> list[Any]:
    return list((await stub.ListCheckpoints(checkpoint_pb2.ListCheckpointsRequest(session_id=sid))).checkpoints)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def test_write_edit_patch_then_restore_the_oldest_across_a_restart(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    env = {"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")}
    state = tmp_path / "state"
    first = await server_factory(env, state_dir=state)
    async with connect(first.address) as stub:
        sid = await coding_session(stub)
        workspace = tmp_path / "ws" / "default" / sid
        workspace.mkdir(parents=True)
        (workspace / "notes.txt").write_bytes(b"alpha\r\nbeta\r\n")
        (workspace / "old.txt").write_bytes(b"to be deleted\n")
        before = snapshot(workspace)

        await tool_turn(stub, fake_model, sid, call("t1", "write", path="fresh/new.txt", content="one\ntwo\n"))
        edited = await tool_turn(
            stub, fake_model, sid, call("t2", "edit", path="notes.txt", oldText="beta", newText="beta edited")
        )
        assert last_of(edited, "tool_result").is_error is False
        patched = await tool_turn(stub, fake_model, sid, call("t3", "apply_patch", input=PATCH))
        assert last_of(patched, "tool_result").is_error is False
        assert (workspace / "notes.txt").read_bytes() == b"alpha\r\nbeta patched\r\n"
        assert not (workspace / "old.txt").exists()

        listed = await checkpoints(stub, sid)
        assert [c.tool_name for c in listed] == ["apply_patch", "edit", "write"]  # newest first
        assert [c.tool_call_id for c in listed] == ["t3", "t2", "t1"]
        assert sorted(listed[0].paths) == ["added.txt", "notes.txt", "old.txt"]
        assert listed[2].paths == ["fresh/new.txt"]
        assert listed[1].stored_bytes == len(b"alpha\r\nbeta\r\n")
    await first.stop(grace=1.0)

    second = await server_factory(env, state_dir=state)
    async with connect(second.address) as stub:
        oldest = (await checkpoints(stub, sid))[-1]
        restored = await stub.RestoreCheckpoint(
            checkpoint_pb2.RestoreCheckpointRequest(
                session_id=sid, checkpoint_id=oldest.checkpoint_id, request_id="r-1"
            )
        )
        assert restored.checkpoints_undone == 3
        assert sorted(set(restored.restored_paths)) == ["added.txt", "fresh/new.txt", "notes.txt", "old.txt"]
        assert snapshot(workspace) == before
        assert await checkpoints(stub, sid) == []
        # The same request id answers the same result; another restore of the id is NOT_FOUND.
        again = await stub.RestoreCheckpoint(
            checkpoint_pb2.RestoreCheckpointRequest(
                session_id=sid, checkpoint_id=oldest.checkpoint_id, request_id="r-1"
            )
        )
        assert again.checkpoints_undone == 3
        error = await rpc_error(
            stub.RestoreCheckpoint(
                checkpoint_pb2.RestoreCheckpointRequest(session_id=sid, checkpoint_id=oldest.checkpoint_id)
            )
        )
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "CHECKPOINT_NOT_FOUND")


async def test_a_failed_mutation_records_nothing(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")})
    async with connect(server.address) as stub:
        sid = await coding_session(stub)
        workspace = tmp_path / "ws" / "default" / sid
        workspace.mkdir(parents=True)
        (workspace / "a.txt").write_text("keep me\n")
        events = await tool_turn(stub, fake_model, sid, call("t1", "edit", path="a.txt", oldText="absent", newText="x"))
        assert last_of(events, "tool_error").tool_name == "edit"
        bad_patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-not there\n+x\n*** End Patch"
        events = await tool_turn(stub, fake_model, sid, call("t2", "apply_patch", input=bad_patch))
        assert last_of(events, "tool_error").tool_name == "apply_patch"
        assert (workspace / "a.txt").read_text() == "keep me\n"
        assert await checkpoints(stub, sid) == []


async def test_bounds_drop_the_oldest_and_errors(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    server = await server_factory(
        {"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws"), "GENERAL_AGENT_CHECKPOINT_MAX_COUNT": "2"}
    )
    async with connect(server.address) as stub:
        sid = await coding_session(stub)
        for index in range(3):
            await tool_turn(stub, fake_model, sid, call(f"t{index}", "write", path="f.txt", content=f"v{index}"))
        assert [c.tool_call_id for c in await checkpoints(stub, sid)] == ["t2", "t1"]

        missing = await rpc_error(
            stub.RestoreCheckpoint(checkpoint_pb2.RestoreCheckpointRequest(session_id=sid, checkpoint_id="nope"))
        )
        assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "CHECKPOINT_NOT_FOUND")
        foreign = await rpc_error(
            stub.ListCheckpoints(checkpoint_pb2.ListCheckpointsRequest(session_id="no-such-session"))
        )
        assert (foreign.code, foreign.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")

        # While a run is active the workspace may be changing: a restore is refused.
        hang = HangReply(after_events=2, reply=TextReply("later"))
        fake_model.enqueue(hang)
        turn = stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("wait")))
        await read_until(turn, "run_started")
        oldest = (await checkpoints(stub, sid))[-1].checkpoint_id
        busy = await rpc_error(
            stub.RestoreCheckpoint(checkpoint_pb2.RestoreCheckpointRequest(session_id=sid, checkpoint_id=oldest))
        )
        assert (busy.code, busy.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_BUSY")
        hang.release()
        [r async for r in turn]
        restored = await stub.RestoreCheckpoint(
            checkpoint_pb2.RestoreCheckpointRequest(session_id=sid, checkpoint_id=oldest)
        )
        assert restored.checkpoints_undone == 2
        assert (tmp_path / "ws" / "default" / sid / "f.txt").read_text() == "v0"
