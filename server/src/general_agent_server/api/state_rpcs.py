"""The RPCs of AgentService that manage a session's state besides its turns (api/servicer.py composes them):
compaction, checkpoints and MCP servers."""

from __future__ import annotations

from general_agent.v1 import checkpoint_pb2, event_pb2, mcp_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent_server.api import convert, mcp
from general_agent_server.api.errors import status_from_detail
from general_agent_server.api.rpc import AgentRpcs, Context, call_context
from general_agent_server.runs.compaction import CompactionOutcome


class StateRpcs(AgentRpcs):
    async def RequestCompaction(
        self, request: session_api.RequestCompactionRequest, context: Context
    ) -> session_api.RequestCompactionResponse:
        outcome = await self._agent.sessions.compact(
            call_context(context),
            request.session_id,
            instructions=request.instructions,
            idem=convert.idempotency(request),
        )
        return session_api.RequestCompactionResponse(result=compaction_result(outcome))

    async def MaybeCompactByTokens(
        self, request: session_api.MaybeCompactByTokensRequest, context: Context
    ) -> session_api.MaybeCompactByTokensResponse:
        outcome = await self._agent.sessions.maybe_compact(
            call_context(context),
            request.session_id,
            threshold_pct=request.threshold_pct,
            cooldown_seconds=request.cooldown.ToTimedelta().total_seconds() if request.HasField("cooldown") else None,
            idem=convert.idempotency(request),
        )
        return session_api.MaybeCompactByTokensResponse(result=compaction_result(outcome))

    async def ListCheckpoints(
        self, request: checkpoint_pb2.ListCheckpointsRequest, context: Context
    ) -> checkpoint_pb2.ListCheckpointsResponse:
        page = await self._agent.sessions.list_checkpoints(
            call_context(context), request.session_id, page_size=request.page_size, page_token=request.page_token
        )
        return checkpoint_pb2.ListCheckpointsResponse(
            checkpoints=[convert.checkpoint_to_proto(c) for c in page.checkpoints],
            next_page_token=page.next_page_token,
        )

    async def RestoreCheckpoint(
        self, request: checkpoint_pb2.RestoreCheckpointRequest, context: Context
    ) -> checkpoint_pb2.RestoreCheckpointResponse:
        result = await self._agent.sessions.restore_checkpoint(
            call_context(context), request.session_id, request.checkpoint_id, idem=convert.idempotency(request)
        )
        return checkpoint_pb2.RestoreCheckpointResponse(
            restored_paths=list(result.restored_paths), checkpoints_undone=result.checkpoints_undone
        )

    async def SetMcpServers(
        self, request: mcp_pb2.SetMcpServersRequest, context: Context
    ) -> mcp_pb2.SetMcpServersResponse:
        statuses = await self._agent.mcp_servers.set_servers(
            call_context(context), request.session_id, mcp.servers_from_proto(request.servers)
        )
        return mcp_pb2.SetMcpServersResponse(statuses=[mcp.status_to_proto(s) for s in statuses])

    async def GetMcpServers(
        self, request: mcp_pb2.GetMcpServersRequest, context: Context
    ) -> mcp_pb2.GetMcpServersResponse:
        servers, disabled = await self._agent.mcp_servers.get_servers(call_context(context), request.session_id)
        return mcp_pb2.GetMcpServersResponse(servers=mcp.servers_to_proto(servers), disabled_servers=list(disabled))

    async def ToggleMcpServer(
        self, request: mcp_pb2.ToggleMcpServerRequest, context: Context
    ) -> mcp_pb2.ToggleMcpServerResponse:
        status = await self._agent.mcp_servers.toggle(
            call_context(context), request.session_id, request.server_name, request.enabled
        )
        return mcp_pb2.ToggleMcpServerResponse(status=mcp.status_to_proto(status))

    async def GetMcpStatus(
        self, request: mcp_pb2.GetMcpStatusRequest, context: Context
    ) -> mcp_pb2.GetMcpStatusResponse:
        statuses = await self._agent.mcp_servers.status(call_context(context), request.session_id)
        return mcp_pb2.GetMcpStatusResponse(statuses=[mcp.status_to_proto(s) for s in statuses])


def compaction_result(outcome: CompactionOutcome) -> session_api.CompactionResult:
    result = session_api.CompactionResult(
        compacted=outcome.compacted,
        reason=event_pb2.CompactionReason.Value(f"COMPACTION_REASON_{outcome.reason.name}"),
        tokens_after=outcome.tokens_after,
        tokens_after_estimated=outcome.tokens_after_estimated,
        messages_before=outcome.messages_before,
        messages_after=outcome.messages_after,
    )
    if outcome.error is not None:
        result.error.CopyFrom(status_from_detail(outcome.error))
    return result
