"""The client commands of the `general-agent` console script (docs/cli.md): `sessions`, `hooks`, `checkpoints`,
`usage` and the interactive `chat`. They talk to a running server through the Python client
(`general_agent.AgentClient`), like any host; nothing here touches the server's own state.

Only argparse lives in this module, so `general-agent serve` does not import the client commands' modules."""

from __future__ import annotations

import argparse
import os
from typing import Any

DEFAULT_ADDRESS = "127.0.0.1:50051"
ADDRESS_ENV = "GENERAL_AGENT_ADDRESS"
TOKEN_ENV = "GENERAL_AGENT_TOKEN"  # noqa: S105 - the name of the variable, not a token
COMMANDS = ("sessions", "hooks", "checkpoints", "usage", "chat")


def _connection_flags(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    parser.add_argument(
        "--address",
        default=os.environ.get(ADDRESS_ENV, DEFAULT_ADDRESS),
        help=f"host:port of the server (env {ADDRESS_ENV}, default {DEFAULT_ADDRESS}).",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV, ""),
        help=f"bearer token (env {TOKEN_ENV}; prefer the variable: a flag value shows in the process list).",
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="Print JSON (the API's field names) instead of text.")


def _sub(parent: Any, name: str, help_text: str, *, json_flag: bool = True) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = parent.add_parser(name, help=help_text, description=help_text)
    _connection_flags(parser, json_flag=json_flag)
    return parser


def add_arguments(commands: Any) -> None:
    """Adds the client commands to the `general-agent` sub-command parser."""
    sessions = commands.add_parser("sessions", help="List, show, fork, reset or delete sessions.")
    actions = sessions.add_subparsers(dest="action", required=True)
    listing = _sub(actions, "list", "List sessions, newest first.")
    listing.add_argument("--key-prefix", default="", help="Only sessions whose session_key starts with this.")
    listing.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="Only sessions with it.")
    listing.add_argument("--limit", type=int, default=0, help="At most this many (0: all).")
    _sub(actions, "show", "Show one session.").add_argument("session_id")
    history = _sub(actions, "history", "Print a session's transcript.")
    history.add_argument("session_id")
    fork = _sub(actions, "fork", "Fork a session (its history up to the last completed run).")
    fork.add_argument("session_id")
    fork.add_argument("--new-id", default="", help="The fork's session id (default: a new UUID).")
    fork.add_argument("--at-sequence", type=int, default=None, help="Fork at the last run completed by then.")
    reset = _sub(actions, "reset", "Clear a session's history (identity and settings stay).")
    reset.add_argument("session_id")
    reset.add_argument("--reason", default="manual")
    _sub(actions, "delete", "Delete a session and everything it owns.").add_argument("session_id")

    hooks = commands.add_parser("hooks", help="Hook registrations.")
    hook_actions = hooks.add_subparsers(dest="action", required=True)
    _sub(hook_actions, "list", "List hook registrations.").add_argument(
        "--session", default="", help="Also this session's own registrations."
    )

    checkpoints = commands.add_parser("checkpoints", help="A session's file checkpoints.")
    checkpoint_actions = checkpoints.add_subparsers(dest="action", required=True)
    _sub(checkpoint_actions, "list", "List checkpoints, newest first.").add_argument("session_id")
    restore = _sub(checkpoint_actions, "restore", "Rewind the workspace to before a checkpoint.")
    restore.add_argument("session_id")
    restore.add_argument("checkpoint_id")

    _sub(commands, "usage", "A session's context fill and cumulative token usage.").add_argument("session_id")

    chat = _sub(commands, "chat", "An interactive chat in the terminal.", json_flag=False)
    chat.add_argument("--session", default="", help="Continue this session (default: a new one).")
    chat.add_argument("--model", default="", help="Model ref for the session (e.g. anthropic/claude-sonnet-4-5).")
    chat.add_argument("--mode", choices=["GENERAL", "CODING"], default="GENERAL", help="Mode of a new session.")
    chat.add_argument("--system-prompt", default="", help="System prompt of a new session.")


def run(args: argparse.Namespace) -> int:
    """Runs the parsed client command; returns the exit code."""
    if args.command == "chat":
        from general_agent_server.console.chat import main as chat_main

        return chat_main(args)
    from general_agent_server.console.commands import main as commands_main

    return commands_main(args)
