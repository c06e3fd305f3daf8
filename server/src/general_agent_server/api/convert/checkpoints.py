"""File checkpoints as listed."""

from __future__ import annotations

from general_agent.v1 import checkpoint_pb2
from general_agent_server.api.convert.values import timestamp
from general_agent_server.workspace.checkpoints.recorder import CheckpointInfo


def checkpoint_to_proto(info: CheckpointInfo) -> checkpoint_pb2.Checkpoint:
    return checkpoint_pb2.Checkpoint(
        checkpoint_id=info.checkpoint_id,
        run_id=info.run_id,
        tool_call_id=info.call_id,
        tool_name=info.tool_name,
        paths=list(info.paths),
        stored_bytes=info.stored_bytes,
        create_time=timestamp(info.created_at),
    )
