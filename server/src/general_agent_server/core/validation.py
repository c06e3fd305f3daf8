"""Validation of what hosts send, with the offending field named (BadRequest field violations)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from general_agent_server.core.content import IMAGE_MIME_TYPES, ContentPart, ImagePart, TextPart
from general_agent_server.core.errors import ErrorCode, ServiceError, invalid_argument, not_implemented
from general_agent_server.core.session import HostedToolDefinition, SessionConfig, ThinkingMode
from general_agent_server.core.tools import TOOL_NAME_PATTERN

# Ids become file names (transcripts, workspaces): a conservative alphabet, no leading dot.
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,127}$")
_LABEL_KEY = re.compile(r"^[a-z0-9][a-z0-9_.\-/]{0,62}$")
_MODEL_REF = re.compile(r"^(anthropic/)?[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
MAX_LABELS = 64
MAX_SESSION_KEY = 512

_IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}


def check_id(field_path: str, value: str) -> None:
    if not _ID.match(value):
        raise invalid_argument(
            field_path, "must be 1–128 characters of letters, digits and _ . : @ -, not starting with . or -"
        )


def check_session_id(value: str, field_path: str = "session_id") -> None:
    if not value:
        raise invalid_argument(field_path, "is required")
    check_id(field_path, value)


def check_config(
    config: SessionConfig,
    *,
    known_profile: bool,
    field_prefix: str = "session",
    global_hosted_names: frozenset[str] = frozenset(),
) -> None:
    if config.model_ref and not _MODEL_REF.match(config.model_ref):
        if "/" in config.model_ref and not config.model_ref.startswith("anthropic/"):
            raise invalid_argument(
                f"{field_prefix}.model_ref",
                "only Anthropic models are served: use anthropic/<id> or a bare id",
            )
        raise invalid_argument(f"{field_prefix}.model_ref", "is not a valid model ref")
    if config.max_tokens < 0:
        raise invalid_argument(f"{field_prefix}.max_tokens", "must not be negative")
    if config.thinking.mode is ThinkingMode.BUDGET and config.thinking.budget_tokens < 1024:
        raise invalid_argument(f"{field_prefix}.thinking.budget_tokens", "must be at least 1024 for BUDGET")
    if config.auth_profile_id and not known_profile:
        raise invalid_argument(f"{field_prefix}.auth_profile_id", f"unknown auth profile {config.auth_profile_id!r}")
    if len(config.labels) > MAX_LABELS:
        raise invalid_argument(f"{field_prefix}.labels", f"at most {MAX_LABELS} labels")
    for key, value in config.labels.items():
        if not _LABEL_KEY.match(key):
            raise invalid_argument(f"{field_prefix}.labels", f"invalid label key {key!r} (lower-case, digits, _ . - /)")
        if len(value) > 256:
            raise invalid_argument(f"{field_prefix}.labels[{key}]", "value longer than 256 characters")
    check_hosted_tools(config.hosted_tools, field=f"{field_prefix}.hosted_tools", global_names=global_hosted_names)
    if config.mcp_servers:
        raise not_implemented("mcp", f"{field_prefix}.mcp_servers")
    # Asked-for capabilities this build does not have are refused, never silently ignored.
    if config.auto_compaction.threshold_pct or config.auto_compaction.cooldown_seconds is not None:
        raise not_implemented("compaction", f"{field_prefix}.auto_compaction")
    if config.memory.enabled:
        raise not_implemented("memory", f"{field_prefix}.memory.enabled")


# Spec Appendix D: names hosted tools may not take (built-ins, the seed's reserved names, memory_*, sessions_*).
RESERVED_TOOL_NAMES = frozenset(
    {
        "read", "write", "edit", "apply_patch", "exec", "process", "web_search", "web_fetch", "browser", "canvas",
        "message", "gateway", "cron", "nodes", "agents_list", "sessions_list", "sessions_history", "sessions_send",
        "subagents", "session_status", "memory_get", "memory_search", "sessions_spawn", "sessions_yield", "tts",
        "glob", "grep",
    }
)  # fmt: skip
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)
MAX_HOSTED_TOOLS = 128


def check_hosted_tools(
    tools: Sequence[HostedToolDefinition], *, field: str, global_names: frozenset[str] = frozenset()
) -> None:
    if len(tools) > MAX_HOSTED_TOOLS:
        raise invalid_argument(field, f"at most {MAX_HOSTED_TOOLS} hosted tools")
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"{field}[{index}]"
        name = tool.name
        if not _TOOL_NAME.match(name):
            raise invalid_argument(f"{where}.name", "must match ^[a-zA-Z0-9_-]{1,64}$")
        if name in RESERVED_TOOL_NAMES or name.startswith(("memory_", "sessions_")):
            raise invalid_argument(f"{where}.name", f"{name!r} is reserved for a built-in tool")
        if name in global_names:
            raise invalid_argument(f"{where}.name", f"{name!r} is already a server-wide hosted tool")
        if name in seen:
            raise invalid_argument(f"{where}.name", f"duplicate hosted tool {name!r}")
        seen.add(name)
        schema = dict(tool.input_schema)
        if schema.get("type") != "object":
            raise invalid_argument(f"{where}.input_schema", 'must be a JSON Schema with "type": "object"')
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise invalid_argument(f"{where}.input_schema", f"is not a valid JSON Schema: {exc.message}") from None
        if tool.timeout_seconds is not None and tool.timeout_seconds <= 0:
            raise invalid_argument(f"{where}.timeout", "must be positive")


def check_turn_input(
    parts: Sequence[ContentPart], *, field_path: str, max_image_bytes: int, max_message_bytes: int
) -> None:
    if not parts:
        raise invalid_argument(field_path, "needs at least one text or image part")
    total = 0
    has_content = False
    for index, part in enumerate(parts):
        where = f"{field_path}[{index}]"
        if isinstance(part, TextPart):
            total += len(part.text.encode())
            has_content = has_content or bool(part.text.strip())
        elif isinstance(part, ImagePart):
            if part.mime_type not in IMAGE_MIME_TYPES:
                raise invalid_argument(
                    f"{where}.image.mime_type", f"must be one of {', '.join(sorted(IMAGE_MIME_TYPES))}"
                )
            if not part.data:
                raise invalid_argument(f"{where}.image.data", "is empty")
            if len(part.data) > max_image_bytes:
                raise ServiceError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    "RESOURCE_LIMIT",
                    f"{where}.image.data: {len(part.data)} bytes exceeds the per-image limit of {max_image_bytes}",
                    metadata={"limit": "max_image_bytes", "value": str(max_image_bytes)},
                )
            if not part.data.startswith(_IMAGE_MAGIC[part.mime_type]) or (
                part.mime_type == "image/webp" and part.data[8:12] != b"WEBP"
            ):
                raise invalid_argument(f"{where}.image.data", f"is not a {part.mime_type} image")
            total += len(part.data)
            has_content = True
    if not has_content:
        raise invalid_argument(field_path, "has no text and no image")
    if total > max_message_bytes:
        raise ServiceError(
            ErrorCode.RESOURCE_EXHAUSTED,
            "RESOURCE_LIMIT",
            f"{field_path}: {total} bytes exceeds the per-message limit of {max_message_bytes}",
            metadata={"limit": "max_message_bytes", "value": str(max_message_bytes)},
        )
