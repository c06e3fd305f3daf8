"""The secret registry and the redactor (security/redaction.py): what is registered where it is loaded, what the
redactor replaces in every shape a sink holds, and the sinks that apply it outside the run loop (the JSONL
writers, the log formatter, the hook payload builder)."""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from general_agent_server.config import load_settings
from general_agent_server.domain.content import ImagePart, TextPart
from general_agent_server.domain.events import RunOutcome, ToolResult
from general_agent_server.domain.session import Usage
from general_agent_server.exports.event_log import EventLog
from general_agent_server.hooks.admin import HookAdmin
from general_agent_server.hooks.payloads import IncludeMessages, MessageHistory, MessageSelection, shape_event
from general_agent_server.hooks.registrations import HookRegistrationSpec, HookTlsSpec
from general_agent_server.logging_setup import JsonFormatter
from general_agent_server.security.redaction import (
    MIN_SECRET_CHARS,
    REDACTED,
    SECRETS,
    redact,
    redact_text,
    redaction_plan,
    register_secret,
    scrub,
)


def fresh(prefix: str = "secret") -> str:
    return f"{prefix}-{secrets.token_hex(10)}"


def test_registered_values_are_replaced_and_short_ones_ignored() -> None:
    key, short = fresh(), "k" * (MIN_SECRET_CHARS - 1)
    assert register_secret(key) == key
    register_secret(short)
    register_secret("")
    assert key in SECRETS.values
    assert short not in SECRETS.values
    assert redact_text(f"a {key} b {short}") == f"a {REDACTED} b {short}"


def test_a_secret_containing_another_is_replaced_whole() -> None:
    inner = fresh("inner")
    outer = f"outer-{inner}-outer"
    register_secret(inner)
    register_secret(outer)
    assert redact_text(f"[{outer}]") == f"[{REDACTED}]"


def test_json_escaped_form_and_pem_lines_are_registered() -> None:
    quoted = f'pa"ss\\{secrets.token_hex(6)}'
    register_secret(quoted)
    assert redact_text(json.dumps({"v": quoted})) == json.dumps({"v": REDACTED})
    body = [secrets.token_hex(32), secrets.token_hex(16)]
    pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END PRIVATE KEY-----\n"
    register_secret(pem)
    assert "-----BEGIN PRIVATE KEY-----" not in SECRETS.values
    assert redact_text(f"x {body[1]} y") == f"x {REDACTED} y"


@dataclass(frozen=True, kw_only=True, slots=True)
class Holder:
    items: tuple[object, ...]
    note: str = ""


def test_redact_walks_every_shape_and_keeps_what_did_not_change() -> None:
    key = register_secret(fresh())
    image = ImagePart(mime_type="image/png", data=key.encode())
    value = Holder(
        items=(
            TextPart(text=f"k={key}"),
            image,
            [{"deep": [key, 3]}],
            ToolResult(call_id="c", tool_name="t", output=()),
        ),
        note="clean",
    )
    redacted = redact(value)
    assert redacted.items[0] == TextPart(text=f"k={REDACTED}")
    assert redacted.items[1] is image  # bytes are never rewritten
    assert redacted.items[2] == [{"deep": [REDACTED, 3]}]
    assert redacted.items[3] is value.items[3]
    clean = Holder(items=(TextPart(text="nothing here"),))
    assert redact(clean) is clean


def test_redact_copies_a_map_or_a_sequence_from_its_first_change_only() -> None:
    """A container is copied when an item changes, wherever that item is, with the items before and after it in
    their order; one without a secret is the same object, however deep its content."""
    key = register_secret(fresh())
    clean_block = {"type": "text", "text": "nothing here"}
    value: dict[str, Any] = {"a": clean_block, "b": f"x {key}", "c": [1, "plain", (key, "y"), clean_block]}
    redacted = redact(value)
    assert redacted == {"a": clean_block, "b": f"x {REDACTED}", "c": [1, "plain", (REDACTED, "y"), clean_block]}
    assert list(redacted) == ["a", "b", "c"]
    assert redacted["a"] is clean_block
    assert redacted["c"][3] is clean_block
    assert isinstance(redacted["c"][2], tuple)
    assert value["b"] == f"x {key}"  # the input is left as it was
    untouched = {"m": [clean_block, ("t", {"n": "still nothing"})]}
    assert redact(untouched) is untouched


@dataclass(frozen=True, kw_only=True, slots=True)
class Typed:
    name: str
    count: int
    at: datetime
    outcome: RunOutcome | None
    usage: Usage
    kind: Literal["typed"] = "typed"
    parent: Typed | None = None
    extra: object = None


def test_redact_walks_only_the_fields_whose_declared_type_can_hold_text() -> None:
    """The walk of a record skips what its annotations say is a number, a time, an enum, a constant or a record of
    numbers; what can hold text (a string, a union with one, an untyped field, the record itself) is walked."""
    key = register_secret(fresh())
    at = datetime.now(UTC)
    inner = Typed(name=key, count=1, at=at, outcome=None, usage=Usage(), extra=[key])
    value = Typed(name=f"x{key}", count=2, at=at, outcome=RunOutcome.COMPLETED, usage=Usage(), parent=inner)
    assert redaction_plan(Typed) == ("name", "parent", "extra")
    assert redaction_plan(Usage) == ()
    redacted = redact(value)
    assert redacted.name == f"x{REDACTED}"
    assert redacted.parent is not None
    assert (redacted.parent.name, redacted.parent.extra) == (REDACTED, [REDACTED])
    assert (redacted.count, redacted.at, redacted.outcome, redacted.usage) == (2, at, RunOutcome.COMPLETED, Usage())


def test_scrub_covers_the_registry_and_key_shapes() -> None:
    key = register_secret(fresh("brave"))
    assert scrub(f"{key} and sk-ant-unregistered-0123456789") == f"{REDACTED} and {REDACTED}"


def test_settings_register_every_key_they_load(tmp_path: Path) -> None:
    keys = {name: fresh(name) for name in ("env", "file", "profile_env", "profile_file", "brave", "firecrawl")}
    (tmp_path / "default.key").write_text(keys["file"])
    (tmp_path / "profile.key").write_text(keys["profile_file"])
    config = tmp_path / "c.toml"
    profile_file = tmp_path / "profile.key"
    config.write_text(
        f'[auth_profiles.a]\napi_key_env = "PROFILE_KEY"\n[auth_profiles.b]\napi_key_file = "{profile_file}"\n'
    )
    environ = {
        "GENERAL_AGENT_CONFIG": str(config),
        "PROFILE_KEY": keys["profile_env"],
        "BRAVE_API_KEY": keys["brave"],
        "FIRECRAWL_API_KEY": keys["firecrawl"],
    }
    load_settings(None, {**environ, "ANTHROPIC_API_KEY": keys["env"]})
    load_settings(None, {**environ, "GENERAL_AGENT_ANTHROPIC_API_KEY_FILE": str(tmp_path / "default.key")})
    assert set(keys.values()) <= set(SECRETS.values)


def test_a_hook_registration_registers_its_tls_key() -> None:
    lines = [secrets.token_hex(32), secrets.token_hex(20)]
    key = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END PRIVATE KEY-----"
    spec = HookRegistrationSpec(
        plugin_id="p", target="127.0.0.1:1", bindings=(), tls=HookTlsSpec(client_cert_pem="c", client_key_pem=key)
    )
    _live, stored = HookAdmin.for_store("default", spec)
    assert stored.tls is not None
    assert stored.tls.client_key_pem == ""
    assert set(lines) <= set(SECRETS.values)


def test_hook_payloads_are_redacted() -> None:
    key = register_secret(fresh())
    history = MessageHistory(messages=({"role": "assistant", "content": [{"type": "text", "text": key}]},))
    shaped = shape_event({"result": {"text": key}, "messages": history}, MessageSelection(include=IncludeMessages.ALL))
    assert REDACTED in json.dumps(shaped)
    assert key not in json.dumps(shaped)


async def test_jsonl_writers_redact_every_line(tmp_path: Path) -> None:
    key = register_secret(fresh())
    log = EventLog(tmp_path)
    log.start()
    log.query_started("default", "s1", "run-1", [TextPart(text=f"my key is {key}")])
    await log.close()
    written = log.path_for("default", "s1").read_text()
    assert REDACTED in written
    assert key not in written


def test_log_lines_are_redacted_in_every_field() -> None:
    key = register_secret(fresh())
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "saw %s", (key,), None)
    record.category = f"tool_result {key}"
    line = JsonFormatter().format(record)
    assert key not in line
    assert json.loads(line)["category"] == f"tool_result {REDACTED}"
