"""The Go convenience package (clients/go/agent) and its example: `go vet` is clean, the package's own tests
pass, and examples/hosted runs against a live `general-agent serve` subprocess: its approval callback approves
`write`, its `lookup` handler answers the hosted call, the run completes, and the error helpers decode a
NOT_FOUND's reason."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from general_agent.testing import FakeAnthropicThread
from tests.e2e.conftest import GO_CLIENT_DIR, INSTALL_HINT, describe_run, require_executable
from tests.e2e.hosted_examples import (
    PROMPT,
    check_answered_once,
    check_hosted_example,
    script_cut_run,
    script_lookup_and_write,
    script_slow_reply,
)
from tests.support.subprocess_server import ServerProcess

GO_TIMEOUT = 300.0


def go(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [require_executable("go"), *args]
    env = {**os.environ, "GOFLAGS": "-mod=mod", **(env or {})}
    result = subprocess.run(
        command, cwd=GO_CLIENT_DIR, env=env, capture_output=True, text=True, timeout=GO_TIMEOUT, check=False
    )
    assert result.returncode == 0, f"({INSTALL_HINT})\n{describe_run(result)}"
    return result


@pytest.fixture(scope="session")
def go_hosted_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("go-example") / "hosted"
    go("build", "-o", str(out), "./examples/hosted")
    return out


def test_go_vet_is_clean_and_the_package_tests_pass() -> None:
    go("vet", "./...")
    result = go("test", "-count=1", "./agent/")
    assert "ok" in result.stdout, describe_run(result)


def test_go_run_reattaches_after_the_connection_is_cut(
    server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    """clients/go/agent/reattach_live_test.go: the hosted handler cuts the connection (a TCP proxy) before it
    answers; Run reattaches, resends the answer, and yields every event of the session once, in order. Then a
    turn whose connection is cut at its first delta: Turn follows the run up with WatchSession."""
    script_cut_run(fake_model_thread, "Go")
    script_slow_reply(fake_model_thread)

    result = go(
        "test",
        "-tags",
        "live",
        "-run",
        "Live",
        "-count=1",
        "-v",
        "./agent/",
        env={"GENERAL_AGENT_TEST_ADDRESS": server_process.address},
    )

    assert "--- PASS: TestLiveRunReattachesAfterTheConnectionIsCut" in result.stdout, describe_run(result)
    assert "--- PASS: TestLiveTurnFollowsUpAfterTheConnectionIsCut" in result.stdout, describe_run(result)
    check_answered_once(fake_model_thread)


def test_go_example_answers_an_approval_and_a_hosted_call(
    go_hosted_example: Path, server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    script_lookup_and_write(fake_model_thread, "Go")

    result = subprocess.run(
        [str(go_hosted_example), "-addr", server_process.address, "-prompt", PROMPT],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    check_hosted_example(result, server_process, fake_model_thread, "Go")
