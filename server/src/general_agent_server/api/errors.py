"""The one exit for errors: every failure becomes a `google.rpc.Status` with ErrorInfo (domain
"general-agent"), BadRequest field violations for validation, and RetryInfo where waiting helps."""

from __future__ import annotations

import logging
from typing import NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from general_agent_server.domain.errors import ErrorCode, ErrorDetail, ServiceError, internal

logger = logging.getLogger(__name__)

DOMAIN = "general-agent"

_CODES: dict[ErrorCode, int] = {code: getattr(code_pb2, code.value) for code in ErrorCode}


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def status_from_detail(detail: ErrorDetail) -> status_pb2.Status:
    """For failures carried inside events (turn_complete.error, run_finished.error)."""
    info = error_details_pb2.ErrorInfo(reason=detail.reason, domain=DOMAIN, metadata=dict(detail.metadata))
    return status_pb2.Status(code=_CODES[detail.code], message=detail.message, details=[_pack(info)])


def status_from_error(error: ServiceError) -> status_pb2.Status:
    status = status_from_detail(error.detail())
    if error.field_violations:
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                for v in error.field_violations
            ]
        )
        status.details.append(_pack(bad_request))
    if error.retry_after_seconds is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(error.retry_after_seconds * 1e9))
        status.details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    return status


def as_service_error(exc: BaseException) -> ServiceError:
    if isinstance(exc, ServiceError):
        return exc
    logger.exception("unexpected error", exc_info=exc, extra={"category": "system"})
    return internal("internal error; see the server log")


async def abort(context: grpc.aio.ServicerContext[object, object], exc: BaseException) -> NoReturn:
    """Ends the call with the rich status of `exc`."""
    status = status_from_error(as_service_error(exc))
    await context.abort_with_status(rpc_status.to_status(status))
    raise AssertionError("abort_with_status returned")  # pragma: no cover
