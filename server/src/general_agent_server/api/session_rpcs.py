"""The session RPCs of AgentService (api/servicer.py composes them): create, read, list, delete, resume,
continue, fork and reset a session, its history and its usage."""

from __future__ import annotations

from collections.abc import Sequence

from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import session_pb2
from general_agent_server.api import convert
from general_agent_server.api.rpc import AgentRpcs, Context, call_context
from general_agent_server.domain.context import SessionView
from general_agent_server.domain.errors import invalid_argument
from general_agent_server.hooks.registrations import HookRegistrationSpec


class SessionRpcs(AgentRpcs):
    async def CreateSession(
        self, request: session_api.CreateSessionRequest, context: Context
    ) -> session_api.CreateSessionResponse:
        if not request.HasField("session"):
            raise invalid_argument("session", "is required")
        created = await self._agent.sessions.create_session(
            call_context(context),
            identity=convert.identity_from_proto(request.session.identity, "session.identity"),
            config=convert.config_from_proto(request.session),
            api_key=request.api_key,
            idem=convert.idempotency(request),
            hook_registrations=convert.session_registrations(request.session),
        )
        return session_api.CreateSessionResponse(
            session=await self._with_registrations(created.view, created.registrations)
        )

    async def GetSession(
        self, request: session_api.GetSessionRequest, context: Context
    ) -> session_api.GetSessionResponse:
        view = await self._agent.sessions.get_session(call_context(context), request.session_id)
        return session_api.GetSessionResponse(session=await self._with_registrations(view))

    async def _with_registrations(
        self, view: SessionView, known: Sequence[HookRegistrationSpec] | None = None
    ) -> session_pb2.Session:
        """The session with its own hook registrations (as stored: never a TLS client key); `known` when the caller
        has just stored them, else they are read."""
        session = convert.session_to_proto(view)
        specs = known
        if specs is None:
            specs = await self._agent.session_registrations(view.record.tenant, view.record.session_id)
        session.hook_registrations.extend(convert.registration_to_proto(s) for s in specs)
        return session

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

    async def DeleteSession(
        self, request: session_api.DeleteSessionRequest, context: Context
    ) -> session_api.DeleteSessionResponse:
        deleted = await self._agent.sessions.delete_session(
            call_context(context), request.session_id, idem=convert.idempotency(request)
        )
        return session_api.DeleteSessionResponse(deleted=deleted)

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

    async def ResetSession(
        self, request: session_api.ResetSessionRequest, context: Context
    ) -> session_api.ResetSessionResponse:
        view = await self._agent.sessions.reset_session(
            call_context(context), request.session_id, request.reason, idem=convert.idempotency(request)
        )
        return session_api.ResetSessionResponse(session=convert.session_to_proto(view))

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

    async def GetUsage(self, request: session_api.GetUsageRequest, context: Context) -> session_api.GetUsageResponse:
        view = await self._agent.sessions.get_session(call_context(context), request.session_id)
        response = session_api.GetUsageResponse(cumulative_usage=convert.usage_to_proto(view.record.cumulative_usage))
        if view.record.usage_snapshot is not None:
            response.usage_snapshot.CopyFrom(convert.snapshot_to_proto(view.record.usage_snapshot))
        return response
