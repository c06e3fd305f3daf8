"""Typed errors decoded from the service's rich status.

Every failed RPC carries a canonical gRPC code and, in the ``grpc-status-details-bin`` trailer, a
``google.rpc.Status`` whose details hold a ``google.rpc.ErrorInfo`` (``reason``, domain
``"general-agent"``, ``metadata``), ``BadRequest`` field violations for validation errors and
``RetryInfo`` on UNAVAILABLE / RESOURCE_EXHAUSTED. :class:`AgentError` exposes all of it as plain
attributes; branch on ``.reason`` (stable, listed in ``error_reason.proto``), never on ``.message``.

A few reasons have their own subclass so callers can ``except SessionNotFound:``; every other reason
is a plain :class:`AgentError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

__all__ = [
    "DOMAIN",
    "STATUS_DETAILS_KEY",
    "AgentError",
    "ApprovalPending",
    "CheckpointNotFound",
    "EventsExpired",
    "IdentityMismatch",
    "InvalidHook",
    "InvalidPageToken",
    "McpServerNotFound",
    "NoApiKey",
    "PermissionDenied",
    "RequestIdReused",
    "ResourceLimit",
    "SessionAlreadyExists",
    "SessionBusy",
    "SessionNotFound",
    "ShuttingDown",
    "SlowConsumer",
    "ToolCallAlreadyResolved",
    "Unauthenticated",
    "UnknownToolCall",
    "error_class",
]

DOMAIN = "general-agent"
"""The ErrorInfo domain of every error this service produces."""

STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""The trailing-metadata key that carries the serialized ``google.rpc.Status``."""

_CODE_BY_NUMBER: dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}


class AgentError(Exception):
    """A failed call, with the decoded ErrorInfo, BadRequest and RetryInfo details.

    Attributes:
        code: the canonical gRPC status code.
        message: the human-readable status message (never contains secrets; not for branching).
        reason: the ErrorInfo reason (e.g. ``"SESSION_NOT_FOUND"``), or ``""`` when absent.
        domain: the ErrorInfo domain (``"general-agent"``), or ``""`` when absent.
        metadata: the ErrorInfo metadata (e.g. ``{"session_id": ...}``).
        field_violations: ``(field, description)`` pairs from BadRequest, in order.
        retry_delay: seconds to wait before retrying (RetryInfo), or ``None``.
        status: the decoded ``google.rpc.Status``, or ``None`` when the server sent none.
        request_id: the ``x-request-id`` the client sent with the failed call (for the server log), or
            ``""``.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str = "",
        *,
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        field_violations: Iterable[tuple[str, str]] = (),
        retry_delay: float | None = None,
        status: Any = None,
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata: dict[str, str] = dict(metadata or {})
        self.field_violations: list[tuple[str, str]] = list(field_violations)
        self.retry_delay = retry_delay
        self.status: Any = status
        self.request_id = request_id

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, *, request_id: str = "") -> AgentError:
        """Decodes a failed call into the matching :class:`AgentError` subclass: a ``grpc.aio`` call's
        ``AioRpcError``, or the ``grpc.RpcError`` a blocking (``grpc.insecure_channel``) call raises.

        The rich status is read from the trailing metadata directly (``grpc_status.rpc_status.from_call``
        wants a live call, and raises when code or message disagree; this never raises).
        """
        code = error.code()
        message = error.details() or ""
        status = _status_from_trailers(error.trailing_metadata())
        if status is None:
            return _make(code, message, request_id=request_id)
        return _from_status(status, fallback_code=code, fallback_message=message, request_id=request_id)

    @classmethod
    def from_status(cls, status: Any) -> AgentError:
        """Builds an error from a ``google.rpc.Status`` message, such as ``run_finished.error`` or
        ``turn_complete.error`` of an event."""
        return _from_status(status, fallback_code=grpc.StatusCode.UNKNOWN, fallback_message="")

    # ------------------------------------------------------------------ presentation
    @property
    def code_name(self) -> str:
        """The status code's name, e.g. ``"NOT_FOUND"``."""
        name: str = self.code.name
        return name

    def field_violation(self, field: str) -> str | None:
        """The description of the violation naming exactly ``field``, or ``None``."""
        for name, description in self.field_violations:
            if name == field:
                return description
        return None

    def __str__(self) -> str:
        label = f"{self.code_name} {self.reason}" if self.reason else self.code_name
        return f"{label}: {self.message}" if self.message else label

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code_name}, reason={self.reason!r}, message={self.message!r}, "
            f"metadata={self.metadata!r}, field_violations={self.field_violations!r}, "
            f"retry_delay={self.retry_delay!r}, request_id={self.request_id!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle through their args; keep every attribute (the status proto is dropped).
        return (
            _rebuild,
            (
                type(self),
                self.code.name,
                self.message,
                self.reason,
                self.domain,
                self.metadata,
                self.field_violations,
                self.retry_delay,
                self.request_id,
            ),
        )


class SessionNotFound(AgentError):
    """NOT_FOUND ``SESSION_NOT_FOUND``: no such session for this tenant (metadata ``session_id``)."""


class SessionAlreadyExists(AgentError):
    """ALREADY_EXISTS ``SESSION_ALREADY_EXISTS``: CreateSession with an id already in use."""


class SessionBusy(AgentError):
    """``SESSION_BUSY``: a run is active or suspended (metadata ``active_run_id``, ``state``)."""


class NoApiKey(AgentError):
    """FAILED_PRECONDITION ``NO_API_KEY``: no credential resolves for the session; nothing was written."""


class IdentityMismatch(AgentError):
    """FAILED_PRECONDITION ``IDENTITY_MISMATCH``: ContinueSession changed the mode while a run is active."""


class UnknownToolCall(AgentError):
    """NOT_FOUND ``UNKNOWN_TOOL_CALL``: no pending hosted call or approval with that id in the session."""


class ToolCallAlreadyResolved(AgentError):
    """FAILED_PRECONDITION ``TOOL_CALL_ALREADY_RESOLVED``: the call was answered differently (metadata
    ``resolved_by``); an identical retry is not an error."""


class ApprovalPending(AgentError):
    """FAILED_PRECONDITION ``APPROVAL_PENDING``: a hosted result for a call still awaiting approval."""


class CheckpointNotFound(AgentError):
    """NOT_FOUND ``CHECKPOINT_NOT_FOUND``: no such checkpoint in the session."""


class McpServerNotFound(AgentError):
    """NOT_FOUND ``MCP_SERVER_NOT_FOUND``: the session has no MCP server of that name."""


class InvalidHook(AgentError):
    """INVALID_ARGUMENT ``INVALID_HOOK``: a hook registration or EmitHook name the server refuses."""


class RequestIdReused(AgentError):
    """INVALID_ARGUMENT ``REQUEST_ID_REUSED``: a request_id replayed with a different body."""


class InvalidPageToken(AgentError):
    """INVALID_ARGUMENT ``INVALID_PAGE_TOKEN``: a page token used with other filters, or not ours."""


class EventsExpired(AgentError):
    """OUT_OF_RANGE ``EVENTS_EXPIRED``: a cursor older than the event retention (metadata
    ``oldest_sequence``)."""


class SlowConsumer(AgentError):
    """RESOURCE_EXHAUSTED ``SLOW_CONSUMER``: this stream fell too far behind and was ended."""


class ResourceLimit(AgentError):
    """RESOURCE_EXHAUSTED ``RESOURCE_LIMIT``: a server or tenant limit (``retry_delay`` says when to retry)."""


class ShuttingDown(AgentError):
    """UNAVAILABLE ``SHUTTING_DOWN``: the server is stopping; retry on another replica or later."""


class Unauthenticated(AgentError):
    """UNAUTHENTICATED: no or an unknown bearer token."""


class PermissionDenied(AgentError):
    """PERMISSION_DENIED: the token's role may not do this."""


_BY_REASON: dict[str, type[AgentError]] = {
    "SESSION_NOT_FOUND": SessionNotFound,
    "SESSION_ALREADY_EXISTS": SessionAlreadyExists,
    "SESSION_BUSY": SessionBusy,
    "NO_API_KEY": NoApiKey,
    "IDENTITY_MISMATCH": IdentityMismatch,
    "UNKNOWN_TOOL_CALL": UnknownToolCall,
    "TOOL_CALL_ALREADY_RESOLVED": ToolCallAlreadyResolved,
    "APPROVAL_PENDING": ApprovalPending,
    "CHECKPOINT_NOT_FOUND": CheckpointNotFound,
    "MCP_SERVER_NOT_FOUND": McpServerNotFound,
    "INVALID_HOOK": InvalidHook,
    "REQUEST_ID_REUSED": RequestIdReused,
    "INVALID_PAGE_TOKEN": InvalidPageToken,
    "EVENTS_EXPIRED": EventsExpired,
    "SLOW_CONSUMER": SlowConsumer,
    "RESOURCE_LIMIT": ResourceLimit,
    "SHUTTING_DOWN": ShuttingDown,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
}
_BY_CODE: dict[grpc.StatusCode, type[AgentError]] = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def error_class(reason: str, code: grpc.StatusCode | None = None) -> type[AgentError]:
    """The subclass for an ErrorInfo reason (or, without one, for the code), else :class:`AgentError`."""
    found = _BY_REASON.get(reason)
    if found is None and code is not None:
        found = _BY_CODE.get(code)
    return found or AgentError


def _make(code: grpc.StatusCode, message: str, **kwargs: Any) -> AgentError:
    error_type = error_class(str(kwargs.get("reason", "")), code)
    return error_type(code, message, **kwargs)


def _rebuild(
    error_type: type[AgentError],
    code_name: str,
    message: str,
    reason: str,
    domain: str,
    metadata: dict[str, str],
    field_violations: list[tuple[str, str]],
    retry_delay: float | None,
    request_id: str,
) -> AgentError:
    return error_type(
        grpc.StatusCode[code_name],
        message,
        reason=reason,
        domain=domain,
        metadata=metadata,
        field_violations=field_violations,
        retry_delay=retry_delay,
        request_id=request_id,
    )


def _status_from_trailers(trailers: Any) -> Any:
    for key, value in trailers or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except Exception:  # a malformed trailer must not hide the original error
                return None
    return None


def _from_status(
    status: Any, *, fallback_code: grpc.StatusCode, fallback_message: str, request_id: str = ""
) -> AgentError:
    code = _CODE_BY_NUMBER.get(int(status.code), fallback_code)
    message: str = str(status.message) or fallback_message
    reason = ""
    domain = ""
    metadata: dict[str, str] = {}
    violations: list[tuple[str, str]] = []
    retry_delay: float | None = None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, domain = str(info.reason), str(info.domain)
            metadata = {str(k): str(v) for k, v in info.metadata.items()}
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            violations.extend((str(v.field), str(v.description)) for v in bad_request.field_violations)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_delay = float(retry.retry_delay.ToTimedelta().total_seconds())
    return _make(
        code,
        message,
        reason=reason,
        domain=domain,
        metadata=metadata,
        field_violations=violations,
        retry_delay=retry_delay,
        status=status,
        request_id=request_id,
    )
