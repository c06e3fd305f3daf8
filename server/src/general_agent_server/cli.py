"""`general-agent serve`, `settings`, `memory` (docs/memory.md) and the client commands `sessions`, `hooks`,
`checkpoints`, `usage` and `chat` (docs/cli.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from general_agent_server import __version__, console
from general_agent_server.config import ConfigError, StartError, add_flags, load_settings, settings_table_markdown
from general_agent_server.config.docs import configuration_page
from general_agent_server.hardening import harden_process
from general_agent_server.logging_setup import configure_logging
from general_agent_server.memory.inspect import add_arguments as add_memory_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="general-agent", description="The General Agent Service.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="Run the gRPC server.")
    add_flags(serve_parser)
    settings_parser = commands.add_parser("settings", help="Print the configuration table (Markdown).")
    settings_parser.add_argument(
        "--page", action="store_true", help="Print the whole configuration page (docs/configuration.md)."
    )
    memory_parser = commands.add_parser("memory", help="List, search or delete one user's memories.")
    add_memory_arguments(memory_parser)
    console.add_arguments(commands)
    args = parser.parse_args(argv)
    if args.command in console.COMMANDS:
        return console.run(args)
    if args.command == "memory":
        return _memory(args)
    if args.command == "settings":
        print(configuration_page() if args.page else settings_table_markdown(), end="\n" if not args.page else "")
        return 0
    try:
        settings = load_settings(args, os.environ)
    except ConfigError as exc:
        print(f"general-agent: configuration error: {exc}", file=sys.stderr)
        return 2
    secrets = [p.api_key for p in settings.auth_profiles.values()]
    if settings.default_profile is not None:
        secrets.append(settings.default_profile.api_key)
    configure_logging(level=settings.log_level, fmt=settings.log_format, secrets=[s for s in secrets if s])
    # Before any command can run: exec's commands must not read this process (see hardening.py).
    harden_process()
    if settings.workers > 1:
        from general_agent_server.workers import Workers, strip_workers

        serve_args = (argv if argv is not None else sys.argv[1:])[1:]  # after "serve"
        return Workers(settings, strip_workers(serve_args)).run()
    from general_agent_server.app import serve

    try:
        asyncio.run(serve(settings))
    except StartError as exc:
        print(f"general-agent: {exc}", file=sys.stderr)
        return 1
    return 0


def _memory(args: argparse.Namespace) -> int:
    from general_agent_server.memory.inspect import run

    try:
        state_dir = args.state_dir or load_settings(None, os.environ).state_dir
    except ConfigError as exc:
        print(f"general-agent: configuration error: {exc}", file=sys.stderr)
        return 2
    code, output = asyncio.run(run(args, Path(state_dir)))
    print(output, file=sys.stdout if code == 0 else sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
