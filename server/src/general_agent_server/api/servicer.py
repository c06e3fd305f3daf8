"""AgentService over the agent (agent.py). Each method converts its request, calls one of the agent's services
and converts the answer; errors leave through api/errors.abort. RPCs of capabilities this build does not serve
yet answer UNIMPLEMENTED with ErrorInfo naming the capability."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc
from google.protobuf import json_format

import general_agent_server
from general_agent.v1 import agent_service_pb2_grpc as api_grpc
from general_agent.v1 import checkpoint_pb2, event_pb2, hook_registration_pb2, mcp_pb2, session_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import server_info_pb2 as server_info_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.agent import Agent
from general_agent_server.api import convert, mcp
from general_agent_server.api.auth_interceptor import current_caller
from general_agent_server.api.decoding import InvalidRequest
from general_agent_server.api.errors import abort, status_from_detail
from general_agent_server.api.interceptors import current_request_id
from general_agent_server.api.server_limits import tenant_limits
from general_agent_server.domain.context import CallContext, SessionView
from general_agent_server.domain.errors import invalid_argument
from general_agent_server.runs.compaction import CompactionOutcome

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
Req = TypeVar("Req")
Resp = TypeVar("Resp")

# Capabilities this build serves, reported by GetServerInfo.
CAPABILITIES = (
    "sessions",
    "compaction",
    "mcp",
    "streaming_turns",
    "watch",
    "idempotency",
    "transcript",
    "usage",
    "tools",
    "hosted_tools",
    "approvals",
    "steering",
    "run_control",
    "busy_policy",
    "run_session",
    "fork",
    "hooks_remote",
    "hooks_session",
    "plugins",
    "checkpoints",
    "subagents",
    "file_tools",
    "web_tools",
)


def call_context(context: Context) -> CallContext:
    """The caller the auth interceptor found (api/auth_interceptor.py); without authentication configured, the
    operator (tenant `default`, role admin)."""
    caller = current_caller()
    return CallContext(tenant=caller.tenant, role=caller.role, request_id=current_request_id())


def unary(
    fn: Callable[[Any, Req, Context], Awaitable[Resp]],
) -> Callable[[Any, Req, Context], Awaitable[Resp]]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: Context) -> Resp:
        try:
            return await fn(self, request, context)
        except Exception as exc:  # every error leaves through one function
            await abort(context, exc)

    return wrapper


def server_stream(
    fn: Callable[[Any, Req, Context], AsyncIterator[Resp]],
) -> Callable[[Any, Req, Context], AsyncIterator[Resp]]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: Context) -> AsyncIterator[Resp]:
        try:
            async for item in fn(self, request, context):
                yield item
        except Exception as exc:
            await abort(context, exc)

    return wrapper


class AgentServicer(api_grpc.AgentServiceServicer):
    def __init__(self, agent: Agent, *, limits: server_info_api.ServerLimits) -> None:
        self._agent = agent
        # GetServerInfo.limits, built from the server's settings (api/server_limits.py).
        self._limits = limits

    # ------------------------------------------------------------------ sessions
    @unary
    async def CreateSession(
        self, request: session_api.CreateSessionRequest, context: Context
    ) -> session_api.CreateSessionResponse:
        if not request.HasField("session"):
            raise invalid_argument("session", "is required")
        view = await self._agent.sessions.create_session(
            call_context(context),
            identity=convert.identity_from_proto(request.session.identity, "session.identity"),
            config=convert.config_from_proto(request.session),
            api_key=request.api_key,
            idem=convert.idempotency(request),
            hook_registrations=convert.session_registrations(request.session),
        )
        return session_api.CreateSessionResponse(session=await self._with_registrations(view))

    @unary
    async def GetSession(
        self, request: session_api.GetSessionRequest, context: Context
    ) -> session_api.GetSessionResponse:
        view = await self._agent.sessions.get_session(call_context(context), request.session_id)
        return session_api.GetSessionResponse(session=await self._with_registrations(view))

    async def _with_registrations(self, view: SessionView) -> session_pb2.Session:
        """The session with its own hook registrations (as stored: never a TLS client key)."""
        session = convert.session_to_proto(view)
        specs = await self._agent.session_registrations(view.record.tenant, view.record.session_id)
        session.hook_registrations.extend(convert.registration_to_proto(s) for s in specs)
        return session

    @unary
    async def ListSessions(
        self, request: session_api.ListSessionsRequest, context: Context
    ) -> session_api.ListSessionsResponse:
        views, token = await self._agent.sessions.list_sessions(
            call_context(context),
            convert.query_from_proto(request),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return session_api.ListSessionsResponse(
            sessions=[convert.session_to_proto(v) for v in views], next_page_token=token
        )

    @unary
    async def DeleteSession(
        self, request: session_api.DeleteSessionRequest, context: Context
    ) -> session_api.DeleteSessionResponse:
        deleted = await self._agent.sessions.delete_session(
            call_context(context), request.session_id, idem=convert.idempotency(request)
        )
        return session_api.DeleteSessionResponse(deleted=deleted)

    @unary
    async def ResumeSession(
        self, request: session_api.ResumeSessionRequest, context: Context
    ) -> session_api.ResumeSessionResponse:
        view = await self._agent.sessions.resume_session(
            call_context(context),
            request.session_id,
            convert.overrides_from_proto(request.overrides),
            idem=convert.idempotency(request),
        )
        return session_api.ResumeSessionResponse(session=convert.session_to_proto(view))

    @unary
    async def ContinueSession(
        self, request: session_api.ContinueSessionRequest, context: Context
    ) -> session_api.ContinueSessionResponse:
        if not request.HasField("identity"):
            raise invalid_argument("identity", "is required")
        view = await self._agent.sessions.continue_session(
            call_context(context),
            convert.identity_from_proto(request.identity, "identity"),
            convert.overrides_from_proto(request.overrides),
            idem=convert.idempotency(request),
        )
        return session_api.ContinueSessionResponse(session=convert.session_to_proto(view))

    @unary
    async def ForkSession(
        self, request: session_api.ForkSessionRequest, context: Context
    ) -> session_api.ForkSessionResponse:
        view = await self._agent.forks.fork_session(
            call_context(context),
            request.source_session_id,
            identity=convert.identity_from_proto(request.identity, "identity"),
            overrides=convert.overrides_from_proto(request.overrides),
            at_sequence=request.at_sequence if request.HasField("at_sequence") else None,
            copy_workspace=request.copy_workspace,
            inherit_mode=request.identity.mode == session_pb2.SESSION_MODE_UNSPECIFIED,
            idem=convert.idempotency(request),
        )
        return session_api.ForkSessionResponse(session=convert.session_to_proto(view))

    @unary
    async def ResetSession(
        self, request: session_api.ResetSessionRequest, context: Context
    ) -> session_api.ResetSessionResponse:
        view = await self._agent.sessions.reset_session(
            call_context(context), request.session_id, request.reason, idem=convert.idempotency(request)
        )
        return session_api.ResetSessionResponse(session=convert.session_to_proto(view))

    @unary
    async def GetSessionHistory(
        self, request: session_api.GetSessionHistoryRequest, context: Context
    ) -> session_api.GetSessionHistoryResponse:
        entries, token = await self._agent.sessions.get_history(
            call_context(context),
            request.session_id,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return session_api.GetSessionHistoryResponse(
            entries=[convert.transcript_to_proto(e) for e in entries], next_page_token=token
        )

    # ------------------------------------------------------------------ streams
    @server_stream
    async def StreamTurn(
        self, request: turn_api.StreamTurnRequest, context: Context
    ) -> AsyncIterator[turn_api.StreamTurnResponse]:
        events = self._agent.runs.stream_turn(
            call_context(context),
            request.session_id,
            convert.parts_from_proto(request.input, "input"),
            options=convert.turn_options_from_proto(request.options),
            idem=convert.idempotency(request),
        )
        async for event in events:
            response = turn_api.StreamTurnResponse()
            convert.event_to_proto(event, response.event)
            yield response

    @server_stream
    async def WatchSession(
        self, request: turn_api.WatchSessionRequest, context: Context
    ) -> AsyncIterator[turn_api.WatchSessionResponse]:
        after = request.after_sequence if request.HasField("after_sequence") else None
        async for event in self._agent.runs.watch(call_context(context), request.session_id, after):
            response = turn_api.WatchSessionResponse()
            convert.event_to_proto(event, response.event)
            yield response

    async def RunSession(
        self, request_iterator: AsyncIterator[run_session_api.RunSessionRequest | InvalidRequest], context: Context
    ) -> AsyncIterator[run_session_api.RunSessionResponse]:
        """Requests that api/decoding.py refused arrive as InvalidRequest: the first one ends the call, a
        later one is answered with a command_result."""
        try:
            first = await anext(aiter(request_iterator), None)
            if first is None:
                raise invalid_argument("attach", "the stream ended before attach")
            attach = convert.attach_from_proto(first)
            commands = (convert.command_from_proto(r, attach.on_disconnect) async for r in request_iterator)
            stream = self._agent.attach(call_context(context), attach)
            async for output in stream.run(commands):
                yield convert.run_output_to_proto(output)
        except Exception as exc:
            await abort(context, exc)

    @server_stream
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

    @server_stream
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

    @unary
    async def InjectMessage(
        self, request: turn_api.InjectMessageRequest, context: Context
    ) -> turn_api.InjectMessageResponse:
        run_id = await self._agent.runs.inject(
            call_context(context),
            request.session_id,
            convert.parts_from_proto(request.input, "input"),
            idem=convert.idempotency(request),
        )
        return turn_api.InjectMessageResponse(accepted=bool(run_id), run_id=run_id)

    @unary
    async def RequestStop(self, request: turn_api.RequestStopRequest, context: Context) -> turn_api.RequestStopResponse:
        run_id = await self._agent.runs.request_stop(call_context(context), request.session_id)
        return turn_api.RequestStopResponse(run_id=run_id)

    @unary
    async def ClearStop(self, request: turn_api.ClearStopRequest, context: Context) -> turn_api.ClearStopResponse:
        was_set = await self._agent.runs.clear_stop(call_context(context), request.session_id)
        return turn_api.ClearStopResponse(was_set=was_set)

    @unary
    async def CancelRun(self, request: turn_api.CancelRunRequest, context: Context) -> turn_api.CancelRunResponse:
        run_id = await self._agent.runs.cancel_run(call_context(context), request.session_id, request.run_id)
        return turn_api.CancelRunResponse(cancelled=bool(run_id), run_id=run_id)

    @unary
    async def RegisterHooks(
        self, request: hook_registration_pb2.RegisterHooksRequest, context: Context
    ) -> hook_registration_pb2.RegisterHooksResponse:
        if not request.HasField("registration"):
            raise invalid_argument("registration", "is required")
        spec = await self._agent.register_hooks(
            call_context(context), convert.registration_from_proto(request.registration)
        )
        return hook_registration_pb2.RegisterHooksResponse(registration=convert.registration_to_proto(spec))

    @unary
    async def UnregisterHooks(
        self, request: hook_registration_pb2.UnregisterHooksRequest, context: Context
    ) -> hook_registration_pb2.UnregisterHooksResponse:
        removed = await self._agent.hooks.unregister(call_context(context), request.plugin_id, request.session_id)
        return hook_registration_pb2.UnregisterHooksResponse(removed=removed)

    @unary
    async def ListHookRegistrations(
        self, request: hook_registration_pb2.ListHookRegistrationsRequest, context: Context
    ) -> hook_registration_pb2.ListHookRegistrationsResponse:
        specs = await self._agent.hooks.registrations(call_context(context).tenant, request.session_id)
        return hook_registration_pb2.ListHookRegistrationsResponse(
            registrations=[convert.registration_to_proto(s) for s in specs]
        )

    @unary
    async def EmitHook(
        self, request: hook_registration_pb2.EmitHookRequest, context: Context
    ) -> hook_registration_pb2.EmitHookResponse:
        hook_context = json_format.MessageToDict(request.context) if request.HasField("context") else {}
        outcome = await self._agent.emit_hook(
            call_context(context),
            request.hook_name,
            json_format.MessageToDict(request.event),
            hook_context,
            request.session_id,
        )
        response = hook_registration_pb2.EmitHookResponse(
            handler_count=outcome.handler_count,
            handler_errors=[
                hook_registration_pb2.HookHandlerError(plugin_id=e.plugin_id, message=e.message) for e in outcome.errors
            ],
        )
        if outcome.result is not None:
            response.result.CopyFrom(convert.struct_from_dict(outcome.result))
        return response

    @unary
    async def GetUsage(self, request: session_api.GetUsageRequest, context: Context) -> session_api.GetUsageResponse:
        view = await self._agent.sessions.get_session(call_context(context), request.session_id)
        response = session_api.GetUsageResponse(cumulative_usage=convert.usage_to_proto(view.record.cumulative_usage))
        if view.record.usage_snapshot is not None:
            response.usage_snapshot.CopyFrom(convert.snapshot_to_proto(view.record.usage_snapshot))
        return response

    # ------------------------------------------------------------------ info
    @unary
    async def GetServerInfo(
        self, request: server_info_api.GetServerInfoRequest, context: Context
    ) -> server_info_api.GetServerInfoResponse:
        settings = self._agent.settings
        tenant = call_context(context).tenant
        return server_info_api.GetServerInfoResponse(
            version=general_agent_server.__version__,
            api_version=general_agent_server.API_VERSION,
            capabilities=[*CAPABILITIES, "memory"] if self._agent.memory is not None else list(CAPABILITIES),
            default_model_ref=settings.default_model,
            limits=tenant_limits(self._limits, settings.tenants, tenant),
            tenant=tenant,
        )

    # ------------------------------------------------------------------ later capabilities
    @unary
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

    @unary
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

    @unary
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

    @unary
    async def RestoreCheckpoint(
        self, request: checkpoint_pb2.RestoreCheckpointRequest, context: Context
    ) -> checkpoint_pb2.RestoreCheckpointResponse:
        result = await self._agent.sessions.restore_checkpoint(
            call_context(context), request.session_id, request.checkpoint_id, idem=convert.idempotency(request)
        )
        return checkpoint_pb2.RestoreCheckpointResponse(
            restored_paths=list(result.restored_paths), checkpoints_undone=result.checkpoints_undone
        )

    @unary
    async def SetMcpServers(
        self, request: mcp_pb2.SetMcpServersRequest, context: Context
    ) -> mcp_pb2.SetMcpServersResponse:
        statuses = await self._agent.mcp_servers.set_servers(
            call_context(context), request.session_id, mcp.servers_from_proto(request.servers)
        )
        return mcp_pb2.SetMcpServersResponse(statuses=[mcp.status_to_proto(s) for s in statuses])

    @unary
    async def GetMcpServers(
        self, request: mcp_pb2.GetMcpServersRequest, context: Context
    ) -> mcp_pb2.GetMcpServersResponse:
        servers, disabled = await self._agent.mcp_servers.get_servers(call_context(context), request.session_id)
        return mcp_pb2.GetMcpServersResponse(servers=mcp.servers_to_proto(servers), disabled_servers=list(disabled))

    @unary
    async def ToggleMcpServer(
        self, request: mcp_pb2.ToggleMcpServerRequest, context: Context
    ) -> mcp_pb2.ToggleMcpServerResponse:
        status = await self._agent.mcp_servers.toggle(
            call_context(context), request.session_id, request.server_name, request.enabled
        )
        return mcp_pb2.ToggleMcpServerResponse(status=mcp.status_to_proto(status))

    @unary
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
