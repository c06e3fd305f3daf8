"""`exec` commands cannot read the server's environment, memory or state (tools/shell/command_user.py, hardening.py).

A real `general-agent serve` subprocess starts with an API key and a marker variable in its environment. A
CODING session's scripted model then runs commands that try the ways in: the environ of $PPID and of the
server's pid (directly, from a grandchild and from a background process), its mem and maps, its cmdline, and
the state database. The marker is not a secret the server knows, so the redactor would not hide it: what the
commands print shows what they could read. Twice: with the server run as root (commands switch to `nobody`)
and as an unprivileged user (commands run as that same user; the server is non-dumpable)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from general_agent.v1 import session_pb2
from general_agent_server.store.sqlite import DB_FILE_NAME
from tests.e2e.conftest import require_executable
from tests.support.events import last_of
from tests.support.hook_host import wait_until
from tests.support.rpc import connect, create_session, stream_turn
from tests.support.subprocess_server import ServerProcess, ServerProcesses

NOBODY = 65534
MARKER = "GA_PLANTED_MARKER"
MARKER_VALUE = f"planted-marker-{secrets.token_hex(8)}"
API_KEY = f"sk-ant-planted-{secrets.token_hex(12)}"


def probes(pid: int, state: Path) -> dict[str, str]:
    """Commands by name; each prints what it could read (stderr included)."""
    environ = f"/proc/{pid}/environ"
    return {
        "whoami": "id -u",
        "ppid_environ": "echo parent=$PPID; tr '\\0' '\\n' < /proc/$PPID/environ",
        "pid_environ": f"tr '\\0' '\\n' < {environ}; tr '\\0' '\\n' < /proc/{pid}/task/{pid}/environ",
        "grandchild": f"sh -c 'sh -c \"cat {environ}\"' | tr '\\0' '\\n'",
        "mem": f"head -c 64 /proc/{pid}/mem; cat /proc/{pid}/maps",
        "cmdline": f"tr '\\0' ' ' < /proc/{pid}/cmdline",
        "state_db": f"cat {state / DB_FILE_NAME} > /dev/null && echo read-the-database",
    }


def exec_round(commands: dict[str, str]) -> Reply:
    return Reply(
        blocks=[ToolUseBlock(id=f"toolu_{name}", name="exec", input={"command": c}) for name, c in commands.items()]
    )


async def probe(
    servers: ServerProcesses, fake: FakeAnthropicThread, *, prefix: list[str], owner: int
) -> dict[str, str]:
    """Starts the server (through `prefix`, its state directory owned by `owner`), runs every probe in a CODING
    session, checks that none read the server, and returns their outputs by name."""
    server = servers.make(api_key=API_KEY, extra={MARKER: MARKER_VALUE}, prefix=prefix)
    os.chown(server.state_dir, owner, owner)
    server.env["GENERAL_AGENT_WORKSPACE_DIR"] = str(server.state_dir / "ws")
    server.start()
    assert server.process is not None
    pid = server.process.pid
    try:
        outputs, background = await run_probes(server, fake, pid)
    finally:
        server.kill()
    assert f"parent={pid}\n" in outputs["ppid_environ"]  # the shell's parent is the server
    for name, text in [*outputs.items(), ("background", background)]:
        for leaked in (MARKER, MARKER_VALUE, "ANTHROPIC_API_KEY", API_KEY, "[REDACTED]"):
            assert leaked not in text, f"{name} read the server: {text!r}"
    for name in ("ppid_environ", "pid_environ", "grandchild", "mem"):
        assert "Permission denied" in outputs[name], f"{name}: {outputs[name]!r}"
    assert "Permission denied" in background
    # cmdline stays readable (ps needs it) and holds no secret: keys never come from flags.
    assert " serve " in outputs["cmdline"]
    assert outputs["whoami"].strip() == str(NOBODY)
    return outputs


async def run_probes(server: ServerProcess, fake: FakeAnthropicThread, pid: int) -> tuple[dict[str, str], str]:
    """The output of every probe, and of a background process that read the server's environ."""
    commands = probes(pid, server.state_dir)
    background = f"{{ tr '\\0' '\\n' < /proc/{pid}/environ; }} > background.txt 2>&1; echo finished >> background.txt"
    fake.enqueue(
        exec_round(commands),
        Reply(blocks=[ToolUseBlock(id="toolu_bg", name="exec", input={"command": background, "background": True})]),
        TextReply("done"),
    )
    async with connect(server.address) as stub:
        mode = session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING)
        sid = (await create_session(stub, identity=mode)).identity.session_id
        events = await stream_turn(stub, sid, "try to read the server")
    assert last_of(events, "run_finished").error.message == ""
    outputs = {
        e.tool_result.call_id.removeprefix("toolu_"): e.tool_result.output[0].text.text
        for e in events
        if e.WhichOneof("event") == "tool_result"
    }
    written = server.state_dir / "ws" / "default" / sid / "background.txt"
    await wait_until(lambda: written.is_file() and "finished" in written.read_text(), describe=lambda: "background")
    return outputs, written.read_text()


async def test_commands_of_a_root_server_run_as_nobody_and_read_nothing(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    assert os.geteuid() == 0, "this test starts the server as root (CI runs as root)"
    outputs = await probe(server_processes, fake_model_thread, prefix=[], owner=0)
    assert "Permission denied" in outputs["state_db"]
    assert "read-the-database" not in outputs["state_db"]


async def test_commands_of_an_unprivileged_server_cannot_read_it(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    # The interpreter and the checkout may sit where uid 65534 cannot read (under /root): the server gets
    # CAP_DAC_READ_SEARCH as an ambient capability to reach them. Its commands inherit it too, so what keeps
    # them out of the server's /proc files is only that the server is non-dumpable (same uid, same
    # capabilities, no CAP_SYS_PTRACE).
    setpriv = require_executable("setpriv")
    caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *caps, "--"]
    await probe(server_processes, fake_model_thread, prefix=prefix, owner=NOBODY)
