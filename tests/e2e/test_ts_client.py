"""The TypeScript convenience layer (clients/ts/src/agent.ts) and its example: `tsc --strict` is clean over
src/ and examples/, and examples/hosted.ts runs against a live `general-agent serve` subprocess: its approval
callback approves `write`, its `lookup` handler answers the hosted call, the run completes, and errorDetails
reads a NOT_FOUND's ErrorInfo reason through the generated google/rpc/error_details types."""

from __future__ import annotations

import json
import subprocess

from general_agent.testing import FakeAnthropicThread
from tests.e2e.conftest import TS_CLIENT_DIR, TSX, describe_run, require_executable, require_file
from tests.e2e.hosted_examples import (
    PROMPT,
    check_answered_once,
    check_hosted_example,
    script_cut_run,
    script_lookup_and_write,
    script_slow_reply,
)
from tests.support.subprocess_server import ServerProcess

TSC = TS_CLIENT_DIR / "node_modules" / ".bin" / "tsc"


def test_tsc_strict_is_clean() -> None:
    require_executable("node")
    tsc = require_file(TSC, "tsc (clients/ts/node_modules/.bin/tsc)")
    config = json.loads((TS_CLIENT_DIR / "tsconfig.json").read_text())
    assert config["compilerOptions"]["strict"] is True
    assert {"src", "examples"} <= set(config["include"])

    result = subprocess.run(
        [str(tsc), "--noEmit", "-p", "."], cwd=TS_CLIENT_DIR, capture_output=True, text=True, timeout=180, check=False
    )

    assert result.returncode == 0, describe_run(result)
    assert "BinaryReader" not in (TS_CLIENT_DIR / "src" / "smoke.ts").read_text()  # no hand-written wire decoding


def test_ts_run_reattaches_after_the_connection_is_cut(
    server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    """clients/ts/test/reattach.live.ts: the hosted handler cuts the connection (a TCP proxy) before it answers;
    run() reattaches, resends the answer, and yields every event of the session once, in order."""
    tsx = require_file(TSX, "tsx (clients/ts/node_modules/.bin/tsx)")
    script_cut_run(fake_model_thread, "TypeScript")
    script_slow_reply(fake_model_thread)

    result = subprocess.run(
        [str(tsx), "test/reattach.live.ts", server_process.address],
        cwd=TS_CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    assert result.returncode == 0, describe_run(result, server_process)
    assert result.stdout == "ok\n", describe_run(result, server_process)
    check_answered_once(fake_model_thread)


def test_ts_example_answers_an_approval_and_a_hosted_call(
    server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    require_executable("node")
    tsx = require_file(TSX, "tsx (clients/ts/node_modules/.bin/tsx)")
    script_lookup_and_write(fake_model_thread, "TypeScript")

    result = subprocess.run(
        [str(tsx), "examples/hosted.ts", "--addr", server_process.address, "--prompt", PROMPT],
        cwd=TS_CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    check_hosted_example(result, server_process, fake_model_thread, "TypeScript")
