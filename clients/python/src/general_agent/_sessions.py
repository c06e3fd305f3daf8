"""Session RPCs of :class:`~general_agent.AgentClient`: create, get, list, delete, resume, continue, fork,
reset and the transcript (docs/protocol.md)."""

# ruff: noqa: ASYNC109

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import TypedDict, Unpack

from general_agent import _convert as conv
from general_agent._convert import ModeName, ThinkingName
from general_agent._transport import DEFAULT, Timeout, Transport, follow_pages, new_id
from general_agent.v1 import approval_pb2, hosted_tool_pb2, session_messages_pb2, session_pb2, transcript_pb2


class Overrides(TypedDict, total=False):
    """Session overrides of resume, continue and fork (absent = keep)."""

    system_prompt: str
    model_ref: str
    api_key: str
    max_tokens: int
    auth_profile_id: str
    thinking: ThinkingName
    thinking_budget: int
    approval_policy: Sequence[str]


def _overrides(values: Overrides) -> session_pb2.SessionOverrides:
    policy = values.get("approval_policy")
    return session_pb2.SessionOverrides(
        system_prompt=values.get("system_prompt"),
        model_ref=values.get("model_ref"),
        api_key=values.get("api_key", ""),
        max_tokens=values.get("max_tokens"),
        auth_profile_id=values.get("auth_profile_id"),
        thinking=conv.thinking(values.get("thinking"), values.get("thinking_budget", 0)),
        approval_policy=None if policy is None else approval_pb2.ApprovalPolicy(entries=policy),
    )


class SessionsMixin(Transport):
    def _registered_tools(self) -> list[hosted_tool_pb2.HostedToolDefinition]:
        """The hosted tools :meth:`create_session` declares by default (the client's registered ones)."""
        return []

    async def create_session(
        self,
        *,
        session_id: str = "",
        session_key: str = "",
        mode: ModeName | int = "GENERAL",
        system_prompt: str = "",
        model_ref: str = "",
        labels: Mapping[str, str] | None = None,
        api_key: str = "",
        hosted_tools: Sequence[hosted_tool_pb2.HostedToolDefinition] | None = None,
        approval_policy: Sequence[str] | None = None,
        allowed_tools: Sequence[str] | None = None,
        thinking: ThinkingName | None = None,
        thinking_budget: int = 0,
        max_tokens: int = 0,
        auth_profile_id: str = "",
        request_id: str = "",
        session: session_pb2.Session | None = None,
        timeout: Timeout = DEFAULT,
    ) -> session_pb2.Session:
        """Creates a session (empty ``session_id`` ⇒ a server UUID) and returns it.

        ``hosted_tools`` defaults to the tools registered with ``@client.hosted_tool`` (``[]`` declares
        none). ``approval_policy`` lists tool names, ``"mutating"`` or ``"all"``. ``session`` is an optional
        template for settings without a keyword here (limits, memory, MCP servers ...); the keywords given
        override it. ``api_key`` stays in server memory only. ``request_id`` is the idempotency key (one is
        made when empty, so a retried call is the same call). Raises SessionAlreadyExists, or AgentError
        INVALID_ARGUMENT with ``field_violations``.
        """
        proto = session_pb2.Session()
        if session is not None:
            proto.CopyFrom(session)
        if session_id:
            proto.identity.session_id = session_id
        if session_key:
            proto.identity.session_key = session_key
        if session is None or mode != "GENERAL":
            proto.identity.mode = conv.mode(mode)
        _apply(proto, system_prompt=system_prompt, model_ref=model_ref, max_tokens=max_tokens)
        if auth_profile_id:
            proto.auth_profile_id = auth_profile_id
        if labels:
            proto.labels.update(labels)
        tools = self._registered_tools() if hosted_tools is None else list(hosted_tools)
        if tools:
            declared = {tool.name for tool in proto.hosted_tools}
            proto.hosted_tools.extend(tool for tool in tools if tool.name not in declared)
        if approval_policy is not None:
            proto.approval_policy.SetInParent()  # an empty policy (nothing needs approval) is not an unset one
            proto.approval_policy.entries[:] = list(approval_policy)
        if allowed_tools is not None:
            proto.allowed_tools[:] = list(allowed_tools)
        chosen = conv.thinking(thinking, thinking_budget)
        if chosen is not None:
            proto.thinking.CopyFrom(chosen)
        request = session_messages_pb2.CreateSessionRequest(
            session=proto, request_id=request_id or new_id(), api_key=api_key
        )
        response: session_messages_pb2.CreateSessionResponse = await self._unary(
            self._stub.CreateSession, request, timeout
        )
        return response.session

    async def get_session(self, session_id: str, *, timeout: Timeout = DEFAULT) -> session_pb2.Session:
        """Returns the session. Raises SessionNotFound."""
        request = session_messages_pb2.GetSessionRequest(session_id=session_id)
        response: session_messages_pb2.GetSessionResponse = await self._unary(self._stub.GetSession, request, timeout)
        return response.session

    async def list_sessions_page(
        self,
        *,
        page_size: int = 0,
        page_token: str = "",
        session_key_prefix: str = "",
        mode: ModeName | int | None = None,
        labels: Mapping[str, str] | None = None,
        parent_session_id: str = "",
        include_children: bool = False,
        timeout: Timeout = DEFAULT,
    ) -> tuple[list[session_pb2.Session], str]:
        """One page of sessions (newest first) and the next page token (``""`` on the last page)."""
        request = session_messages_pb2.ListSessionsRequest(
            page_size=page_size,
            page_token=page_token,
            session_key_prefix=session_key_prefix,
            mode=session_pb2.SESSION_MODE_UNSPECIFIED if mode is None else conv.mode(mode),
            labels=dict(labels or {}),
            parent_session_id=parent_session_id,
            include_children=include_children,
        )
        response: session_messages_pb2.ListSessionsResponse = await self._unary(
            self._stub.ListSessions, request, timeout
        )
        return list(response.sessions), response.next_page_token

    async def list_sessions(
        self,
        *,
        page_size: int = 0,
        session_key_prefix: str = "",
        mode: ModeName | int | None = None,
        labels: Mapping[str, str] | None = None,
        parent_session_id: str = "",
        include_children: bool = False,
        timeout: Timeout = DEFAULT,
    ) -> AsyncGenerator[session_pb2.Session, None]:
        """Every session matching the filters, newest first, following page tokens (``timeout`` applies
        to each page). ``page_size`` 0 = the server default."""
        pages = follow_pages(
            lambda token: self.list_sessions_page(
                page_size=page_size,
                page_token=token,
                session_key_prefix=session_key_prefix,
                mode=mode,
                labels=labels,
                parent_session_id=parent_session_id,
                include_children=include_children,
                timeout=timeout,
            )
        )
        async for session in pages:
            yield session

    async def delete_session(self, session_id: str, *, request_id: str = "", timeout: Timeout = DEFAULT) -> bool:
        """Deletes the session and all it owns; False when it did not exist."""
        request = session_messages_pb2.DeleteSessionRequest(session_id=session_id, request_id=request_id or new_id())
        response: session_messages_pb2.DeleteSessionResponse = await self._unary(
            self._stub.DeleteSession, request, timeout
        )
        return response.deleted

    async def resume_session(
        self, session_id: str, *, request_id: str = "", timeout: Timeout = DEFAULT, **overrides: Unpack[Overrides]
    ) -> session_pb2.Session:
        """Persists the given overrides and returns the session; starts no run. Overrides (``None`` = keep):
        ``system_prompt``, ``model_ref``, ``max_tokens``, ``auth_profile_id``, ``thinking`` (+
        ``thinking_budget``), ``approval_policy`` (clears the always-approved tools); ``api_key`` is held
        in server memory only. Raises SessionNotFound."""
        request = session_messages_pb2.ResumeSessionRequest(
            session_id=session_id, overrides=_overrides(overrides), request_id=request_id or new_id()
        )
        response: session_messages_pb2.ResumeSessionResponse = await self._unary(
            self._stub.ResumeSession, request, timeout
        )
        return response.session

    async def continue_session(
        self,
        session_id: str,
        *,
        session_key: str = "",
        mode: ModeName | int = "GENERAL",
        request_id: str = "",
        timeout: Timeout = DEFAULT,
        **overrides: Unpack[Overrides],
    ) -> session_pb2.Session:
        """ContinueSession: like :meth:`resume_session`, addressed by identity; persists ``session_key`` and
        ``mode`` (a mode change while a run is active ⇒ FAILED_PRECONDITION ``IDENTITY_MISMATCH``)."""
        identity = session_pb2.SessionIdentity(session_id=session_id, session_key=session_key, mode=conv.mode(mode))
        request = session_messages_pb2.ContinueSessionRequest(
            identity=identity, overrides=_overrides(overrides), request_id=request_id or new_id()
        )
        response: session_messages_pb2.ContinueSessionResponse = await self._unary(
            self._stub.ContinueSession, request, timeout
        )
        return response.session

    async def fork_session(
        self,
        source_session_id: str,
        *,
        session_id: str = "",
        session_key: str = "",
        mode: ModeName | int | None = None,
        at_sequence: int | None = None,
        copy_workspace: bool = False,
        request_id: str = "",
        timeout: Timeout = DEFAULT,
        **overrides: Unpack[Overrides],
    ) -> session_pb2.Session:
        """A new session with the source's history up to its last completed run at or before
        ``at_sequence`` (default: the last one). Overrides as for :meth:`resume_session`."""
        identity = session_pb2.SessionIdentity(
            session_id=session_id,
            session_key=session_key,
            mode=session_pb2.SESSION_MODE_UNSPECIFIED if mode is None else conv.mode(mode),
        )
        request = session_messages_pb2.ForkSessionRequest(
            source_session_id=source_session_id,
            identity=identity,
            overrides=_overrides(overrides),
            at_sequence=at_sequence,
            copy_workspace=copy_workspace,
            request_id=request_id or new_id(),
        )
        response: session_messages_pb2.ForkSessionResponse = await self._unary(self._stub.ForkSession, request, timeout)
        return response.session

    async def reset_session(
        self, session_id: str, reason: str = "manual", *, request_id: str = "", timeout: Timeout = DEFAULT
    ) -> session_pb2.Session:
        """Stops any run and clears the model history; identity, config and numbering stay."""
        request = session_messages_pb2.ResetSessionRequest(
            session_id=session_id, reason=reason, request_id=request_id or new_id()
        )
        response: session_messages_pb2.ResetSessionResponse = await self._unary(
            self._stub.ResetSession, request, timeout
        )
        return response.session

    async def history_page(
        self, session_id: str, *, page_size: int = 0, page_token: str = "", timeout: Timeout = DEFAULT
    ) -> tuple[list[transcript_pb2.TranscriptEntry], str]:
        """One page of transcript entries and the next page token (``""`` on the last page)."""
        request = session_messages_pb2.GetSessionHistoryRequest(
            session_id=session_id, page_size=page_size, page_token=page_token
        )
        response: session_messages_pb2.GetSessionHistoryResponse = await self._unary(
            self._stub.GetSessionHistory, request, timeout
        )
        return list(response.entries), response.next_page_token

    async def history(
        self, session_id: str, *, page_size: int = 0, timeout: Timeout = DEFAULT
    ) -> AsyncGenerator[transcript_pb2.TranscriptEntry, None]:
        """Every transcript entry of the session in write order, following page tokens."""
        pages = follow_pages(
            lambda token: self.history_page(session_id, page_size=page_size, page_token=token, timeout=timeout)
        )
        async for entry in pages:
            yield entry


def _apply(proto: session_pb2.Session, *, system_prompt: str, model_ref: str, max_tokens: int) -> None:
    if system_prompt:
        proto.system_prompt = system_prompt
    if model_ref:
        proto.model_ref = model_ref
    if max_tokens:
        proto.max_tokens = max_tokens
