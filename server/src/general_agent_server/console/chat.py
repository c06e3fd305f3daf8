"""`general-agent chat`: an interactive chat with one session in the terminal (docs/cli.md).

Text streams as it arrives, thinking is dimmed, tool calls and results take one line each, a spinner runs
while the model works. Hosted calls and approvals are asked here: the user types a hosted tool's result
(`!message` answers with an error) and approves once, always, or denies with a reason. Each run ends with its
usage. Ctrl-C cancels the run in progress; a second Ctrl-C (or one at the prompt) exits; Ctrl-D exits too.

Input comes from a reader thread that puts stdin's lines on a queue, so every prompt (the next message, a
hosted result, an approval) is an `await` on the event loop and Ctrl-C is the loop's signal handler: nothing
blocks the loop, and a cancelled run's clean-up (CancelRun) happens on the loop too."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import threading
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from general_agent import (
    AgentClient,
    AgentError,
    ApprovalAnswer,
    ApprovalRequested,
    ApprovalResolved,
    AssistantDelta,
    CompactionFinished,
    CompactionStarted,
    Event,
    HostedToolCall,
    ReasoningDelta,
    ReasoningEnd,
    RunFinished,
    ToolCall,
    ToolError,
    ToolResult,
    UsageUpdate,
)

EXIT_INTERRUPTED = 130


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Terminal:
    """The screen side: streamed text, one-line tool notes, the spinner, and prompts answered from stdin."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._prompting = asyncio.Lock()
        self._status = console.status("working…", spinner="dots")
        self._mid_line = False

    def start_reading(self) -> None:
        loop = asyncio.get_running_loop()

        def read() -> None:
            while True:
                line = sys.stdin.readline()
                with contextlib.suppress(RuntimeError):  # the loop has closed: the chat is over
                    loop.call_soon_threadsafe(self._lines.put_nowait, line.rstrip("\n") if line else None)
                if not line:
                    return

        threading.Thread(target=read, name="chat-stdin", daemon=True).start()

    async def ask(self, prompt: str) -> str | None:
        """Prints the prompt and waits for the next line (None at the end of input)."""
        async with self._prompting:
            self.spin(False)
            self.end_line()
            self.console.print(prompt, end="")
            self.console.file.flush()
            return await self._lines.get()

    def spin(self, on: bool) -> None:
        if on:
            self._status.start()
        else:
            self._status.stop()

    def end_line(self) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False

    def stream(self, text: str, *, dim: bool = False) -> None:
        self.spin(False)
        self.console.print(Text(text, style="dim" if dim else ""), end="", soft_wrap=True)
        self.console.file.flush()
        self._mid_line = not text.endswith("\n")

    def note(self, markup: str) -> None:
        self.spin(False)
        self.end_line()
        self.console.print(markup, soft_wrap=True)


class Chat:
    def __init__(self, args: argparse.Namespace, terminal: Terminal) -> None:
        self._args = args
        self._term = terminal
        self._run_task: asyncio.Task[None] | None = None
        self._main_task: asyncio.Task[Any] | None = None
        self._exiting = False
        self._context_pct: float | None = None

    # ------------------------------------------------------------------ Ctrl-C
    def interrupt(self) -> None:
        run = self._run_task
        if run is not None and not run.done() and not run.cancelling():
            run.cancel()
            return
        self._exiting = True
        if self._main_task is not None:
            self._main_task.cancel()

    # ------------------------------------------------------------------ the loop
    async def main(self) -> int:
        self._main_task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self.interrupt)
        self._term.start_reading()
        try:
            async with await AgentClient.connect(self._args.address, token=self._args.token or None) as client:
                session_id = await self._session(client)
                while (text := await self._term.ask("[bold green]you>[/] ")) is not None:
                    if text.strip() in ("/quit", "/exit"):
                        break
                    if text.strip():
                        await self._turn(client, session_id, text.strip())
        except asyncio.CancelledError:
            if not self._exiting:
                raise
            self._term.note("[dim]bye[/]")
            return EXIT_INTERRUPTED
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        self._term.note("[dim]bye[/]")
        return 0

    async def _session(self, client: AgentClient) -> str:
        args = self._args
        if args.session:
            session = await client.get_session(args.session)
            if args.model:
                session = await client.resume_session(args.session, model_ref=args.model)
        else:
            session = await client.create_session(
                mode=args.mode, model_ref=args.model, system_prompt=args.system_prompt, hosted_tools=[]
            )
        model = session.model_ref or (await client.server_info()).default_model_ref
        self._term.note(
            f"[bold]session[/] {escape(session.identity.session_id)} · [bold]model[/] {escape(model)}\n"
            "[dim]Ctrl-C cancels a run, a second Ctrl-C exits; Ctrl-D or /quit exits.[/]"
        )
        return session.identity.session_id

    async def _turn(self, client: AgentClient, session_id: str, text: str) -> None:
        self._term.spin(True)
        run = client.run(session_id, text, on_approval=self._approve, on_hosted_call=self._hosted)
        self._run_task = asyncio.create_task(self._follow(run))
        try:
            await self._run_task
        except asyncio.CancelledError:
            if self._exiting or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            self._term.note("[yellow]cancelled[/] [dim](Ctrl-C again to exit)[/]")
        except AgentError as error:
            self._term.note(f"[red]{escape(str(error))}[/]")
        finally:
            self._term.spin(False)
            self._run_task = None

    async def _follow(self, run: Any) -> None:
        async for event in run:
            self._show(event)

    # ------------------------------------------------------------------ events
    def _show(self, event: Event) -> None:
        term = self._term
        match event:
            case AssistantDelta(text):
                term.stream(text)
            case ReasoningDelta(text):
                term.stream(text, dim=True)
            case ReasoningEnd():
                term.end_line()
            case ToolCall(tool_name=name, input=tool_input):
                term.note(f"[cyan]→ {escape(name)}[/] [dim]{escape(_short(tool_input))}[/]")
                term.spin(True)
            case ToolResult(tool_name=name, text=output):
                term.note(f"[green]← {escape(name)}[/] [dim]{escape(_short(output))}[/]")
                term.spin(True)
            case ToolError(tool_name=name, error=error):
                term.note(f"[red]✗ {escape(name)}: {escape(_short(error))}[/]")
                term.spin(True)
            case ApprovalResolved(decision=decision):
                term.note(f"[dim]{decision.lower().replace('_', ' ')}[/]")
            case CompactionStarted():
                term.note("[dim]compacting the history…[/]")
            case CompactionFinished(compacted=compacted):
                term.note(f"[dim]{'compacted' if compacted else 'nothing to compact'}[/]")
            case UsageUpdate(used_pct=used):
                self._context_pct = used
            case RunFinished() as finished if finished.terminal:
                self._finished(finished)

    def _finished(self, finished: RunFinished) -> None:
        self._term.end_line()
        if finished.outcome != "COMPLETED":
            detail = f": {finished.error.message}" if finished.error is not None else ""
            self._term.note(f"[yellow]{finished.outcome.lower()} {finished.reason.lower()}{escape(detail)}[/]")
        usage = finished.usage
        context = f" · context {self._context_pct:.0f}%" if self._context_pct is not None else ""
        self._term.note(f"[dim]{usage.input_tokens} in · {usage.output_tokens} out{context}[/]")

    # ------------------------------------------------------------------ questions
    async def _hosted(self, call: HostedToolCall) -> str:
        self._term.note(f"[magenta]hosted tool[/] {escape(call.tool_name)} [dim]{escape(_short(call.input))}[/]")
        answer = await self._term.ask("[magenta]result>[/] [dim](!text for an error)[/] ")
        self._term.spin(True)
        if answer is None:
            raise RuntimeError("no answer: the chat's input ended")
        if answer.startswith("!"):
            raise RuntimeError(answer[1:].strip() or "failed")
        return answer

    async def _approve(self, request: ApprovalRequested) -> ApprovalAnswer:
        self._term.note(
            f"[yellow]approval[/] {escape(request.title)} [dim]{escape(request.tool_name)} "
            f"{escape(_short(request.input))} ({request.severity.lower()})[/]"
        )
        while True:
            answer = await self._term.ask(r"[yellow]\[y]es / \[a]lways / \[n]o>[/] ")
            choice = (answer or "n").strip().lower()
            if choice in ("y", "yes"):
                decided = ApprovalAnswer.approve()
            elif choice in ("a", "always"):
                decided = ApprovalAnswer.approve(always=True)
            elif choice in ("n", "no"):
                reason = await self._term.ask("[yellow]reason>[/] ") if answer is not None else None
                decided = ApprovalAnswer.deny(reason or "denied in the chat")
            else:
                continue
            self._term.spin(True)
            return decided


def main(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    chat = Chat(args, Terminal(console))
    try:
        return asyncio.run(chat.main())
    except AgentError as error:
        console.print(f"[red]general-agent: {escape(str(error))}[/]")
        return 1
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
