"""`general-agent serve` with settings it cannot start with (an address it cannot bind, for gRPC or for metrics, a
state_dir it cannot create, a store it cannot reach): one line naming the setting and the system's reason, exit
code 1, and no traceback; with `--workers`, the supervisor stops rather than restart workers that cannot
start."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.e2e.snippets import client_env


def _serve(listen: str, state_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "general_agent_server", "serve", "--listen", listen, "--state-dir", str(state_dir)]
    argv += flags
    return subprocess.run(argv, env=client_env(), capture_output=True, text=True, timeout=60, check=False)


def test_a_port_in_use_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        result = _serve(listen, tmp_path / "state")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"general-agent: listen: cannot bind {listen}: Address already in use"
    assert "add_port" not in result.stderr  # refused before gRPC tries, so gRPC logs no line of its own


def test_an_address_not_of_this_machine_names_the_reason(tmp_path: Path) -> None:
    # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never a local address.
    result = _serve("192.0.2.1:50051", tmp_path / "state", "--insecure-listen")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "general-agent: listen: cannot bind 192.0.2.1:50051: Cannot assign requested address"
    )
    assert "add_port" not in result.stderr


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics = f"127.0.0.1:{taken.getsockname()[1]}"
        result = _serve("127.0.0.1:0", tmp_path / "state", "--metrics-listen", metrics)
    assert _last_line(result) == f"general-agent: metrics_listen: cannot bind {metrics}: Address already in use"


def test_a_state_dir_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    state_dir = tmp_path / "a-file" / "state"
    result = _serve("127.0.0.1:0", state_dir)
    assert _last_line(result) == f"general-agent: state_dir: cannot create {state_dir}: Not a directory"


def test_a_store_that_cannot_be_reached_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    store = f"postgresql://agent@127.0.0.1:{port}/agents"
    result = _serve("127.0.0.1:0", tmp_path / "state", "--store", store)
    assert _last_line(result).startswith(f"general-agent: store: cannot connect to {store}: ")


def _running_with(text: str) -> list[int]:
    """Processes whose command line holds `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_workers_that_cannot_bind_stop_the_supervisor_instead_of_restarting_forever(tmp_path: Path) -> None:
    state_dir = tmp_path / "workers-state"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        result = _serve(listen, state_dir, "--workers", "2")
    assert result.returncode == 1, result.stderr
    assert f"general-agent: listen: cannot bind {listen}: Address already in use" in result.stderr.splitlines()
    assert "before it was serving; stopping the others" in result.stderr
    assert "restarting it" not in result.stderr
    assert _running_with(str(state_dir)) == []
