"""The RPCs of AgentService that answer what a suspended run waits on (api/servicer.py composes them): a
hosted tool's result and an approval. Each streams the run's events while it continues."""

from __future__ import annotations

from collections.abc import AsyncIterator

from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.api import convert
from general_agent_server.api.rpc import AgentRpcs, Context, call_context


class HostedRpcs(AgentRpcs):
    async def SubmitHostedToolResult(
        self, request: turn_api.SubmitHostedToolResultRequest, context: Context
    ) -> AsyncIterator[turn_api.SubmitHostedToolResultResponse]:
        events = self._agent.runs.submit(
            call_context(context),
            request.session_id,
            request.call_id,
            convert.hosted_result_from_proto(request),
            on_disconnect=convert.on_disconnect_from_proto(request.on_disconnect),
        )
        async for event in events:
            response = turn_api.SubmitHostedToolResultResponse()
            convert.event_to_proto(event, response.event)
            yield response

    async def ResolveApproval(
        self, request: turn_api.ResolveApprovalRequest, context: Context
    ) -> AsyncIterator[turn_api.ResolveApprovalResponse]:
        events = self._agent.runs.resolve_approval(
            call_context(context),
            request.session_id,
            request.call_id,
            convert.answer_from_proto(request),
            on_disconnect=convert.on_disconnect_from_proto(request.on_disconnect),
        )
        async for event in events:
            response = turn_api.ResolveApprovalResponse()
            convert.event_to_proto(event, response.event)
            yield response
