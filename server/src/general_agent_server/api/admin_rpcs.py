"""The hook and server-information RPCs of AgentService (api/servicer.py composes them): hook registrations,
EmitHook, and GetServerInfo with the capabilities this build serves."""

from __future__ import annotations

from google.protobuf import json_format

import general_agent_server
from general_agent.v1 import hook_registration_pb2
from general_agent.v1 import server_info_pb2 as server_info_api
from general_agent_server.agent import Agent
from general_agent_server.api import convert
from general_agent_server.api.rpc import AgentRpcs, Context, call_context
from general_agent_server.api.server_limits import tenant_limits
from general_agent_server.domain.errors import invalid_argument

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


class AdminRpcs(AgentRpcs):
    def __init__(self, agent: Agent, *, limits: server_info_api.ServerLimits) -> None:
        super().__init__(agent)
        # GetServerInfo.limits, built from the server's settings (api/server_limits.py).
        self._limits = limits

    async def RegisterHooks(
        self, request: hook_registration_pb2.RegisterHooksRequest, context: Context
    ) -> hook_registration_pb2.RegisterHooksResponse:
        if not request.HasField("registration"):
            raise invalid_argument("registration", "is required")
        spec = await self._agent.register_hooks(
            call_context(context), convert.registration_from_proto(request.registration)
        )
        return hook_registration_pb2.RegisterHooksResponse(registration=convert.registration_to_proto(spec))

    async def UnregisterHooks(
        self, request: hook_registration_pb2.UnregisterHooksRequest, context: Context
    ) -> hook_registration_pb2.UnregisterHooksResponse:
        removed = await self._agent.hooks.unregister(call_context(context), request.plugin_id, request.session_id)
        return hook_registration_pb2.UnregisterHooksResponse(removed=removed)

    async def ListHookRegistrations(
        self, request: hook_registration_pb2.ListHookRegistrationsRequest, context: Context
    ) -> hook_registration_pb2.ListHookRegistrationsResponse:
        specs = await self._agent.hooks.registrations(call_context(context).tenant, request.session_id)
        return hook_registration_pb2.ListHookRegistrationsResponse(
            registrations=[convert.registration_to_proto(s) for s in specs]
        )

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
