"""`general-agent memory list|search|delete` (docs/memory.md, "Inspection and forgetting"): what an operator or a
host sees of one user's memories in the state directory, and how a user's "forget this" is honoured. It works
on the files while the server runs (SQLite WAL). Deleting removes the local memories and the user's rows still
waiting in the outbox, so nothing forgotten is sent later; memories a gateway already holds are deleted there."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from general_agent_server.memory.local import LocalMemoryBackend
from general_agent_server.memory.outbox import Outbox
from general_agent_server.memory.setup import LOCAL_FILE, OUTBOX_FILE
from general_agent_server.memory.types import Scope


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "search", "delete"))
    parser.add_argument("--state-dir", default="", help="The server's state_dir (default: the settings').")
    parser.add_argument("--tenant", default="default", help="The tenant (default: default).")
    parser.add_argument("--user", required=True, help="The memory.user_id.")
    parser.add_argument("--agent", default="*", help="The memory.agent_id (default: every agent of the user).")
    parser.add_argument("--query", default="", help="search: what to look for.")
    parser.add_argument("--id", default="", help="delete: one memory (an id from list or search); else all of them.")
    parser.add_argument("--limit", type=int, default=50, help="list, search: how many.")
    parser.add_argument("--json", action="store_true", help="JSON output.")


async def run(args: argparse.Namespace, state_dir: Path) -> tuple[int, str]:
    """The exit code and the output of one command."""
    memory_dir = state_dir / "memory"
    scope = Scope(args.tenant, args.user, args.agent)
    local = LocalMemoryBackend(memory_dir / LOCAL_FILE)
    try:
        if args.action == "list":
            turns = await local.list_turns(scope, limit=args.limit)
            return 0, _render([t.summary() for t in turns], args.json)
        if args.action == "search":
            if not args.query.strip():
                return 2, "search needs --query"
            if scope.agent_id == "*":
                return 2, "search needs --agent (memories are searched per agent)"
            hits = await local.search(scope, args.query, top_k=args.limit)
            rows = [{"id": h.id, "score": h.score, "conversationId": h.conversation_id, "text": h.text} for h in hits]
            return 0, _render(rows, args.json)
        deleted = await local.delete(scope, args.id)
        pending = 0
        if not args.id:
            outbox = Outbox(memory_dir / OUTBOX_FILE, local)
            pending = await outbox.forget(scope)
            await outbox.aclose()
        answer = {"deletedMessages": deleted, "deletedPending": pending}
        return 0, json.dumps(answer) if args.json else f"deleted {deleted} message(s), {pending} pending capture(s)"
    finally:
        await local.aclose()


def _render(rows: list[dict[str, Any]], as_json: bool) -> str:
    if as_json:
        return json.dumps(rows, ensure_ascii=False, indent=2)
    if not rows:
        return "no memories"
    lines = []
    for row in rows:
        if "messages" in row:
            text = " / ".join(f"{m['role']}: {m['content'][:120]}" for m in row["messages"] if m["content"])
        else:
            text = str(row.get("text", ""))[:240]
        lines.append(f"{row['id']}  {text}")
    return "\n".join(lines)
