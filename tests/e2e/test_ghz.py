"""The `ghz` load tester against a live `general-agent serve` subprocess, with no protoset: ghz learns the API
through server reflection, resolving the method it is told to `--call` as a symbol (which the grpcio-reflection
servicer alone answers "Symbol not found"). A short run must finish with every call OK."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import grpc

from general_agent.v1 import agent_service_pb2_grpc, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from tests.e2e.conftest import GHZ, describe_run, require_file
from tests.support.subprocess_server import ServerProcess

SERVICE = "general_agent.v1.AgentService"
CALLS = 50


def run_ghz(server: ServerProcess, method: str, data: dict[str, Any]) -> dict[str, Any]:
    """`ghz` making CALLS calls of `method` (5 at a time); its JSON report."""
    ghz = str(require_file(GHZ, "ghz (.bin/ghz)"))
    command = [
        ghz,
        "--insecure",
        "--call",
        f"{SERVICE}/{method}",
        "--data",
        json.dumps(data),
        "--total",
        str(CALLS),
        "--concurrency",
        "5",
        "--timeout",
        "20s",
        "--format",
        "json",
        server.address,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    details = describe_run(result, server)
    assert result.returncode == 0, details
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["count"] == CALLS, details
    assert report["errorDistribution"] in (None, {}), details
    assert report["statusCodeDistribution"] == {"OK": CALLS}, details
    assert [call["status"] for call in report["details"]] == ["OK"] * CALLS, details
    return report


def test_get_server_info_under_ghz(server_process: ServerProcess) -> None:
    report = run_ghz(server_process, "GetServerInfo", {})

    assert report["endReason"] == "normal"


def test_get_session_under_ghz(server_process: ServerProcess) -> None:
    with grpc.insecure_channel(server_process.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        created = stub.CreateSession(session_api.CreateSessionRequest(session=session_pb2.Session()), timeout=30)
    session_id = created.session.identity.session_id

    report = run_ghz(server_process, "GetSession", {"sessionId": session_id})

    assert report["endReason"] == "normal"


def test_ghz_refuses_a_method_the_server_does_not_have(server_process: ServerProcess) -> None:
    ghz = str(require_file(GHZ, "ghz (.bin/ghz)"))
    command = [ghz, "--insecure", "--call", f"{SERVICE}/NoSuchMethod", "--total", "1", server_process.address]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    details = describe_run(result, server_process)
    assert result.returncode != 0, details
    assert f"Symbol not found: {SERVICE}.NoSuchMethod" in result.stderr, details
