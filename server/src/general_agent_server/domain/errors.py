"""Domain errors. Every error that leaves the service is a ServiceError; the transport turns it into a
`google.rpc.Status` with ErrorInfo in exactly one place (api/errors.py)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class ErrorCode(enum.Enum):
    """Canonical status codes, named as in google.rpc.Code."""

    CANCELLED = "CANCELLED"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One invalid request field, reported as a BadRequest field violation."""

    field: str
    description: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorDetail:
    """A failure carried inside an event (turn_complete.error, run_finished.error): the domain twin of
    google.rpc.Status with its ErrorInfo."""

    code: ErrorCode
    reason: str
    message: str
    metadata: Mapping[str, str] = field(default_factory=dict)


class ServiceError(Exception):
    """An error answered to the caller with a canonical code and an ErrorInfo reason."""

    def __init__(
        self,
        code: ErrorCode,
        reason: str,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        field_violations: tuple[FieldViolation, ...] = (),
        retry_after_seconds: float | None = None,
    ) -> None:
        if code is ErrorCode.INVALID_ARGUMENT and not field_violations:
            # Every rejection of input names its field: invalid_argument() is the way to build one.
            raise ValueError(f"an INVALID_ARGUMENT error needs a field violation: {message}")
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.metadata: Mapping[str, str] = dict(metadata or {})
        self.field_violations = field_violations
        self.retry_after_seconds = retry_after_seconds

    def detail(self) -> ErrorDetail:
        return ErrorDetail(code=self.code, reason=self.reason, message=self.message, metadata=self.metadata)


def invalid_argument(
    field_path: str,
    description: str,
    *,
    reason: str = "INVALID_ARGUMENT",
    metadata: Mapping[str, str] | None = None,
) -> ServiceError:
    """A validation error naming the offending field (the only way to build an INVALID_ARGUMENT error).
    A description that mentions a value the client sent quotes it with `quoted`."""
    return ServiceError(
        ErrorCode.INVALID_ARGUMENT,
        reason,
        f"{field_path}: {description}",
        metadata=metadata,
        field_violations=(FieldViolation(field_path, description),),
    )


QUOTE_CHARS = 48


def quoted(value: str, limit: int = QUOTE_CHARS) -> str:
    """A client value as error messages show it: quoted, escaped, and cut to a short prefix, so that an
    error never echoes a large value back (status trailers have a size limit clients enforce)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"


def clipped(value: str, limit: int = QUOTE_CHARS) -> str:
    """A client value cut to a short prefix without quotes, for field paths (map keys) and metadata."""
    return value if len(value) <= limit else value[:limit] + "…"


def session_not_found(session_id: str) -> ServiceError:
    return ServiceError(
        ErrorCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
        f"session {quoted(session_id)} not found",
        metadata={"session_id": session_id},
    )


def not_implemented(capability: str, what: str) -> ServiceError:
    """For RPCs and fields whose behaviour a later release provides."""
    return ServiceError(
        ErrorCode.UNIMPLEMENTED,
        "NOT_IMPLEMENTED",
        f"{what} is not implemented yet (capability {capability!r})",
        metadata={"capability": capability},
    )


def internal(message: str) -> ServiceError:
    return ServiceError(ErrorCode.INTERNAL, "INTERNAL", message)
