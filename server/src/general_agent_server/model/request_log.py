"""The `model_request` log line of each Messages API call: model, sizes, duration, status, usage and the
provider's request id, never the key (only the auth profile's id). At DEBUG a `provider_debug` line
follows with the request and the response as the provider saw them, through the redactor."""

from __future__ import annotations

import json
import logging
from typing import Any

from general_agent_server.model.port import Credential, MessageComplete, ModelCallError, ModelRequest
from general_agent_server.sessions import session_log


def log_model_request(
    request: ModelRequest,
    credential: Credential,
    seconds: float,
    complete: MessageComplete | None,
    error: ModelCallError | None,
) -> None:
    status = "ok" if complete is not None else "error" if error is not None else "cancelled"
    fields: dict[str, Any] = {
        "model": request.model,
        "auth_profile": credential.profile_id,
        "max_tokens": request.max_tokens,
        "messages": len(request.messages),
        "system_chars": sum(len(str(block.get("text", ""))) for block in request.system),
        "tools": len(request.tools),
        "thinking": request.thinking is not None,
        "duration_ms": round(seconds * 1000, 1),
        "status": status,
    }
    if complete is not None:
        usage = complete.usage
        fields.update(
            provider_request_id=complete.request_id,
            stop_reason=complete.stop_reason or "",
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens,
        )
    elif error is not None:
        fields.update(provider_request_id=error.provider_request_id, http_status=error.http_status, error=error.message)
    level = logging.WARNING if error is not None else logging.INFO
    session_log.emit("model_request", f"model request {request.model} {status}", level=level, **fields)
    session_log.emit(
        "provider_debug",
        f"model request {request.model} body",
        body=lambda: _bodies(request, complete),
        level=logging.DEBUG,
        provider_request_id=fields.get("provider_request_id", ""),
    )


def _bodies(request: ModelRequest, complete: MessageComplete | None) -> str:
    sent = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "system": request.system,
        "messages": request.messages,
        "tools": request.tools,
        "thinking": request.thinking,
    }
    received = {"content": complete.content, "stop_reason": complete.stop_reason} if complete else None
    return json.dumps({"request": sent, "response": received}, ensure_ascii=False, default=str)
