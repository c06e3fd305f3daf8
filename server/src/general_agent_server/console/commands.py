"""`general-agent sessions|hooks|checkpoints|usage ...` (docs/cli.md): one client call each, printed as a table
or, with `--json`, as one JSON document: a list command prints one array of objects (`[]` when empty), any other
command one object. Objects are the API's messages in protobuf's JSON mapping (`google.protobuf.json_format`) with
the proto's snake_case field names, and every field without presence is printed even at its default (`0`, `""`,
`[]`, `{}`, the enum's `*_UNSPECIFIED` name), so all objects of one message carry the same keys and a script never
has to tell "absent" from zero; message, oneof and `optional` fields appear only when set."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table

from general_agent import AgentClient, AgentError
from general_agent.v1 import hook_registration_pb2, session_pb2, transcript_pb2

Handler = Callable[[AgentClient, argparse.Namespace], Awaitable[Any]]


def as_json(value: Any) -> Any:
    """Messages (and lists and dicts of them) as JSON values."""
    if isinstance(value, Message):
        return json_format.MessageToDict(
            value, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    return value


def _state(session: session_pb2.Session) -> str:
    return session_pb2.SessionState.Name(session.state).removeprefix("SESSION_STATE_").lower()


def _time(message: Any) -> str:
    return message.ToDatetime().strftime("%Y-%m-%d %H:%M:%S") if message.seconds else ""


def _sessions_table(sessions: Iterable[session_pb2.Session]) -> Table:
    table = Table("session", "state", "mode", "key", "messages", "updated", box=None, header_style="bold")
    for s in sessions:
        mode = session_pb2.SessionMode.Name(s.identity.mode).removeprefix("SESSION_MODE_").lower()
        table.add_row(
            s.identity.session_id,
            _state(s),
            mode,
            s.identity.session_key,
            str(s.history_message_count),
            _time(s.update_time),
        )
    return table


def _entry_text(entry: transcript_pb2.TranscriptEntry) -> tuple[str, str]:
    kind = entry.WhichOneof("entry") or "?"
    if kind == "message":
        text = " ".join(p.text.text for p in entry.message.content if p.WhichOneof("part") == "text")
        return entry.message.role, text
    if kind == "assistant":
        return "assistant", entry.assistant.text + (" [aborted]" if entry.assistant.aborted else "")
    if kind == "tool_call":
        return (
            "tool call",
            f"{entry.tool_call.tool_name} {json.dumps(json_format.MessageToDict(entry.tool_call.input))}",
        )
    if kind == "tool_result":
        text = " ".join(p.text.text for p in entry.tool_result.output if p.WhichOneof("part") == "text")
        return "tool error" if entry.tool_result.is_error else "tool result", text
    if kind == "system_prompt":
        return "system", entry.system_prompt.prompt
    if kind == "compaction":
        return "compaction", entry.compaction.summary
    return kind.replace("_", " "), entry.session_reset.reason if kind == "session_reset" else ""


async def _sessions_list(client: AgentClient, args: argparse.Namespace) -> Any:
    labels = dict(label.split("=", 1) for label in args.label)
    found: list[session_pb2.Session] = []
    async for session in client.list_sessions(session_key_prefix=args.key_prefix, labels=labels):
        found.append(session)
        if args.limit and len(found) >= args.limit:
            break
    return found if args.json else _sessions_table(found)


async def _sessions_show(client: AgentClient, args: argparse.Namespace) -> Any:
    session = await client.get_session(args.session_id)
    return session if args.json else json.dumps(as_json(session), indent=2)


async def _sessions_history(client: AgentClient, args: argparse.Namespace) -> Any:
    entries = [entry async for entry in client.history(args.session_id)]
    if args.json:
        return entries
    table = Table("seq", "who", "text", box=None, header_style="bold")
    for entry in entries:
        who, text = _entry_text(entry)
        table.add_row(str(entry.sequence), who, text)
    return table


async def _sessions_fork(client: AgentClient, args: argparse.Namespace) -> Any:
    fork = await client.fork_session(args.session_id, session_id=args.new_id, at_sequence=args.at_sequence)
    return fork if args.json else fork.identity.session_id


async def _sessions_reset(client: AgentClient, args: argparse.Namespace) -> Any:
    session = await client.reset_session(args.session_id, args.reason)
    return session if args.json else f"reset {session.identity.session_id}"


async def _sessions_delete(client: AgentClient, args: argparse.Namespace) -> Any:
    deleted = await client.delete_session(args.session_id)
    if args.json:
        return {"deleted": deleted}
    return f"deleted {args.session_id}" if deleted else f"no session {args.session_id}"


async def _hooks_list(client: AgentClient, args: argparse.Namespace) -> Any:
    registrations = await client.list_hook_registrations(session_id=args.session)
    if args.json:
        return registrations
    table = Table("plugin", "target", "session", "hooks", box=None, header_style="bold")
    for r in registrations:
        names = ", ".join(
            hook_registration_pb2.HookName.Name(h.name).removeprefix("HOOK_NAME_").lower() for h in r.hooks
        )
        table.add_row(r.plugin_id, r.target.address, r.session_id, names)
    return table


async def _checkpoints_list(client: AgentClient, args: argparse.Namespace) -> Any:
    checkpoints = [c async for c in client.list_checkpoints(args.session_id)]
    if args.json:
        return checkpoints
    table = Table("checkpoint", "tool", "paths", "bytes", "created", box=None, header_style="bold")
    for c in checkpoints:
        table.add_row(c.checkpoint_id, c.tool_name, ", ".join(c.paths), str(c.stored_bytes), _time(c.create_time))
    return table


async def _checkpoints_restore(client: AgentClient, args: argparse.Namespace) -> Any:
    restored = await client.restore_checkpoint(args.session_id, args.checkpoint_id)
    if args.json:
        return restored
    paths = ", ".join(restored.restored_paths) or "nothing"
    return f"restored {paths} ({restored.checkpoints_undone} checkpoint(s) undone)"


async def _usage(client: AgentClient, args: argparse.Namespace) -> Any:
    usage = await client.usage(args.session_id)
    if args.json:
        return usage
    snapshot, total = usage.usage_snapshot, usage.cumulative_usage
    return (
        f"context: {snapshot.used_input_tokens} of {snapshot.context_window} tokens ({snapshot.used_pct:.1f}%)\n"
        f"total: {total.input_tokens} in, {total.output_tokens} out, {total.cache_read_input_tokens} cache read, "
        f"{total.cache_creation_input_tokens} cache write, {total.model_calls} model calls"
    )


HANDLERS: dict[tuple[str, str], Handler] = {
    ("sessions", "list"): _sessions_list,
    ("sessions", "show"): _sessions_show,
    ("sessions", "history"): _sessions_history,
    ("sessions", "fork"): _sessions_fork,
    ("sessions", "reset"): _sessions_reset,
    ("sessions", "delete"): _sessions_delete,
    ("hooks", "list"): _hooks_list,
    ("checkpoints", "list"): _checkpoints_list,
    ("checkpoints", "restore"): _checkpoints_restore,
    ("usage", ""): _usage,
}


async def _run(args: argparse.Namespace) -> Any:
    handler = HANDLERS[(args.command, getattr(args, "action", "") or "")]
    async with await AgentClient.connect(args.address, token=args.token or None) as client:
        return await handler(client, args)


def main(args: argparse.Namespace) -> int:
    try:
        output = asyncio.run(_run(args))
    except AgentError as error:
        print(f"general-agent: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(as_json(output), indent=2, ensure_ascii=False))
    elif isinstance(output, Table):
        # Piped output is never cut to a terminal's width (ids stay whole for scripts).
        Console(highlight=False, width=None if sys.stdout.isatty() else 10_000).print(output)
    else:
        print(output)
    return 0
