"""Validation of what hosts send, with the offending field named (BadRequest field violations)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from general_agent_server.domain.content import IMAGE_MIME_TYPES, ContentPart, ImagePart, TextPart
from general_agent_server.domain.errors import ErrorCode, ServiceError, invalid_argument, quoted
from general_agent_server.domain.json_values import check_json_depth
from general_agent_server.domain.session import HostedToolDefinition, SessionConfig, SessionLimits, ThinkingMode

# Ids become file names (transcripts, workspaces): a conservative alphabet, no leading dot.
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,127}$")
_LABEL_KEY = re.compile(r"^[a-z0-9][a-z0-9_.\-/]*$")
_MODEL_REF = re.compile(r"^(anthropic/)?[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
# Identifiers a host chooses that are not file names (request ids, memory ids, tool call ids).
MAX_TOKEN_CHARS = 256
# Names of tools and MCP servers a session lists.
MAX_NAME_CHARS = 64
MAX_MCP_SERVERS = 64
KIB = 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class InputLimits:
    """Bounds on what requests can make the server keep per session; each is a setting of the same name
    (config.py), and a request over one is refused with the field, the limit and its value."""

    max_system_prompt_bytes: int = 256 * KIB
    max_hosted_tools: int = 128
    max_hosted_tool_schema_bytes: int = 64 * KIB
    max_hosted_tool_description_bytes: int = 16 * KIB
    max_labels: int = 64
    max_label_key_chars: int = 63
    max_label_value_chars: int = 256
    max_allowed_tools: int = 256
    max_session_key_chars: int = 512
    max_hook_registrations: int = 64
    max_hook_tls_pem_bytes: int = 64 * KIB


DEFAULT_LIMITS = InputLimits()


def over_limit(
    field_path: str, size: int, unit: str, setting: str, limit: int, *, reason: str = "INVALID_ARGUMENT"
) -> ServiceError:
    return invalid_argument(
        field_path,
        f"{size} {unit} is over the limit of {limit} ({setting})",
        reason=reason,
        metadata={"limit": setting, "value": str(limit)},
    )


def check_size(field_path: str, size: int, unit: str, limits: InputLimits, setting: str) -> None:
    limit: int = getattr(limits, setting)
    if size > limit:
        raise over_limit(field_path, size, unit, setting, limit)


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


def check_token(field_path: str, value: str, *, required: bool = False) -> None:
    """A host-chosen opaque string the server stores or echoes (request ids, tool call ids)."""
    if required and not value:
        raise invalid_argument(field_path, "is required")
    if len(value) > MAX_TOKEN_CHARS:
        raise invalid_argument(field_path, f"is longer than {MAX_TOKEN_CHARS} characters")


def check_sequence(value: int | None, field_path: str) -> None:
    """An event sequence a request names (a cursor or fork point); None means "not given"."""
    if value is not None and value < 0:
        raise invalid_argument(field_path, "must not be negative")


def check_session_key(value: str, field_path: str, limits: InputLimits = DEFAULT_LIMITS) -> None:
    check_size(field_path, len(value), "characters", limits, "max_session_key_chars")


def check_config(
    config: SessionConfig,
    *,
    known_profile: bool,
    field_prefix: str = "session",
    global_hosted_names: frozenset[str] = frozenset(),
    limits: InputLimits = DEFAULT_LIMITS,
    memory_served: bool = True,
) -> None:
    check_size(
        f"{field_prefix}.system_prompt", len(config.system_prompt.encode()), "bytes", limits, "max_system_prompt_bytes"
    )
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
        raise invalid_argument(
            f"{field_prefix}.auth_profile_id", f"unknown auth profile {quoted(config.auth_profile_id)}"
        )
    check_labels(config.labels, f"{field_prefix}.labels", limits)
    check_session_limits(config.limits, f"{field_prefix}.limits")
    check_size(f"{field_prefix}.allowed_tools", len(config.allowed_tools), "tools", limits, "max_allowed_tools")
    _check_names(f"{field_prefix}.allowed_tools", config.allowed_tools)
    if len(config.disabled_mcp_servers) > MAX_MCP_SERVERS:
        raise invalid_argument(f"{field_prefix}.disabled_mcp_servers", f"at most {MAX_MCP_SERVERS} servers")
    _check_names(f"{field_prefix}.disabled_mcp_servers", config.disabled_mcp_servers)
    check_hosted_tools(
        config.hosted_tools, field=f"{field_prefix}.hosted_tools", global_names=global_hosted_names, limits=limits
    )
    unknown = sorted(set(config.disabled_mcp_servers) - set(config.mcp_servers))
    if unknown:
        raise invalid_argument(
            f"{field_prefix}.disabled_mcp_servers", f"{quoted(unknown[0])} is not a configured server"
        )
    # Asked-for capabilities this build does not have are refused, never silently ignored.
    automatic = config.auto_compaction
    if not 0 <= automatic.threshold_pct <= 100:
        raise invalid_argument(f"{field_prefix}.auto_compaction.threshold_pct", "must be between 0 and 100")
    if automatic.cooldown_seconds is not None and automatic.cooldown_seconds < 0:
        raise invalid_argument(f"{field_prefix}.auto_compaction.cooldown", "must not be negative")
    check_memory(config, field_prefix)
    if config.memory.enabled and not memory_served:
        raise ServiceError(
            ErrorCode.UNIMPLEMENTED,
            "NOT_IMPLEMENTED",
            f"{field_prefix}.memory.enabled: this server serves no memory (memory_backend = off)",
            metadata={"capability": "memory"},
        )


# Bounds of a session's recall settings (docs/memory.md, "Configuration").
MAX_RECALL_TOP_K = 20
MAX_RECALL_BUDGET_CHARS = 20_000


def check_memory(config: SessionConfig, field_prefix: str) -> None:
    memory = config.memory
    for name in ("user_id", "agent_id"):
        value = getattr(memory, name)
        check_token(f"{field_prefix}.memory.{name}", value)
        if value and (value != value.strip() or any(ord(c) < 32 for c in value)):
            raise invalid_argument(f"{field_prefix}.memory.{name}", "must not hold control characters or edge spaces")
    if not 0 <= memory.recall_top_k <= MAX_RECALL_TOP_K:
        raise invalid_argument(f"{field_prefix}.memory.recall_top_k", f"must be between 0 and {MAX_RECALL_TOP_K}")
    if not 0 <= memory.recall_budget_chars <= MAX_RECALL_BUDGET_CHARS:
        raise invalid_argument(
            f"{field_prefix}.memory.recall_budget_chars", f"must be between 0 and {MAX_RECALL_BUDGET_CHARS}"
        )


def _check_names(field_path: str, names: Sequence[str]) -> None:
    for index, name in enumerate(names):
        if len(name) > MAX_NAME_CHARS:
            raise invalid_argument(f"{field_path}[{index}]", f"is longer than {MAX_NAME_CHARS} characters")


def check_labels(labels: Mapping[str, str], field_path: str, limits: InputLimits = DEFAULT_LIMITS) -> None:
    check_size(field_path, len(labels), "labels", limits, "max_labels")
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise invalid_argument(field_path, f"invalid label key {quoted(key)} (lower-case, digits, _ . - /)")
        check_size(field_path, len(key), "characters in a key", limits, "max_label_key_chars")
        check_size(f"{field_path}[{key}]", len(value), "characters", limits, "max_label_value_chars")


def check_session_limits(limits: SessionLimits, field_path: str) -> None:
    """0 (or unset) means the server's value; a negative limit would end every run at once."""
    for name in ("max_model_calls_per_run", "max_tool_calls_per_run"):
        if getattr(limits, name) < 0:
            raise invalid_argument(f"{field_path}.{name}", "must not be negative")
    for name, seconds in (
        ("run_deadline", limits.run_deadline_seconds),
        ("hosted_call_timeout", limits.hosted_call_timeout_seconds),
    ):
        if seconds is not None and seconds < 0:
            raise invalid_argument(f"{field_path}.{name}", "must not be negative")


# Names hosted tools may not take (docs/tools.md, hosted tools): built-ins, names kept for tools to come,
# memory_*, sessions_*.
RESERVED_TOOL_NAMES = frozenset(
    {
        "read", "write", "edit", "apply_patch", "exec", "process", "web_search", "web_fetch", "browser", "canvas",
        "message", "gateway", "cron", "nodes", "agents_list", "sessions_list", "sessions_history", "sessions_send",
        "subagents", "session_status", "memory_get", "memory_search", "sessions_spawn", "sessions_yield", "tts",
        "glob", "grep",
    }
)  # fmt: skip
# The provider's tool-name pattern: what a hosted tool may be called.
TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)


def check_hosted_tools(
    tools: Sequence[HostedToolDefinition],
    *,
    field: str,
    global_names: frozenset[str] = frozenset(),
    limits: InputLimits = DEFAULT_LIMITS,
) -> None:
    check_size(field, len(tools), "hosted tools", limits, "max_hosted_tools")
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"{field}[{index}]"
        name = tool.name
        if not _TOOL_NAME.match(name):
            raise invalid_argument(f"{where}.name", "must match ^[a-zA-Z0-9_-]{1,64}$")
        if name in RESERVED_TOOL_NAMES or name.startswith(("memory_", "sessions_")):
            raise invalid_argument(f"{where}.name", f"{quoted(name)} is reserved for a built-in tool")
        if name in global_names:
            raise invalid_argument(f"{where}.name", f"{quoted(name)} is already a server-wide hosted tool")
        if name in seen:
            raise invalid_argument(f"{where}.name", f"duplicate hosted tool {quoted(name)}")
        seen.add(name)
        description_bytes = len(tool.description.encode())
        check_size(f"{where}.description", description_bytes, "bytes", limits, "max_hosted_tool_description_bytes")
        _check_schema(tool, f"{where}.input_schema", limits)
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


def _check_schema(tool: HostedToolDefinition, field_path: str, limits: InputLimits) -> None:
    schema = dict(tool.input_schema)
    check_json_depth(field_path, schema)
    schema_bytes = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode())
    check_size(field_path, schema_bytes, "bytes of JSON", limits, "max_hosted_tool_schema_bytes")
    if schema.get("type") != "object":
        raise invalid_argument(field_path, 'must be a JSON Schema with "type": "object"')
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise invalid_argument(field_path, f"is not a valid JSON Schema: {quoted(exc.message, 120)}") from None
