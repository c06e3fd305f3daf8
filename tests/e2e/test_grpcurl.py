"""grpcurl (a generic, reflection-driven gRPC client) against a live `general-agent serve` subprocess.

This is what an operator debugging the service would do, so it checks that server reflection
describes the API, that the health service answers, that JSON requests work without any generated
code, and that error details reach a client that was never compiled against our protos.

grpcurl prints responses with the proto field names (`session_key`), not the lowerCamelCase JSON
names (`sessionKey`); requests accept both. `field()` reads either spelling so these tests pin the
server's behaviour, not grpcurl's formatting choice.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.e2e.conftest import GRPCURL, describe_run, require_file
from tests.support.subprocess_server import ServerProcess

SERVICE = "general_agent.v1.AgentService"
HEALTH = "grpc.health.v1.Health"
REFLECTION_SERVICES = {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}

# grpcurl exits with 64 + the gRPC status code when the RPC fails.
GRPCURL_STATUS_EXIT_BASE = 64
NOT_FOUND = 5


@pytest.fixture(scope="module")
def grpcurl() -> str:
    return str(require_file(GRPCURL, "grpcurl (.bin/grpcurl)"))


def run_grpcurl(
    grpcurl: str, server: ServerProcess, *args: str, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`grpcurl -plaintext [flags...] <address> [args...]`."""
    command = [grpcurl, "-plaintext", "-max-time", "30", *flags, server.address, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def ok_json(result: subprocess.CompletedProcess[str], server: ServerProcess) -> dict[str, Any]:
    details = describe_run(result, server)
    assert result.returncode == 0, details
    parsed = json.loads(result.stdout)
    assert isinstance(parsed, dict), details
    return parsed


def field(message: dict[str, Any], proto_name: str) -> Any:
    """A field of a JSON-printed message by its proto name, whichever JSON spelling grpcurl used."""
    head, *rest = proto_name.split("_")
    camel = head + "".join(part.capitalize() for part in rest)
    if proto_name in message:
        return message[proto_name]
    return message.get(camel)


def test_list_shows_the_services(grpcurl: str, server_process: ServerProcess) -> None:
    result = run_grpcurl(grpcurl, server_process, "list")

    details = describe_run(result, server_process)
    assert result.returncode == 0, details
    services = set(result.stdout.split())
    assert SERVICE in services, details
    assert HEALTH in services, details
    assert services & REFLECTION_SERVICES, details


def test_describe_shows_the_agent_service(grpcurl: str, server_process: ServerProcess) -> None:
    result = run_grpcurl(grpcurl, server_process, "describe", SERVICE)

    details = describe_run(result, server_process)
    assert result.returncode == 0, details
    assert f"{SERVICE} is a service" in result.stdout, details
    assert "rpc StreamTurn" in result.stdout, details
    assert "rpc CreateSession" in result.stdout, details


@pytest.mark.parametrize(
    ("symbol", "kind", "declaration"),
    [
        (
            f"{SERVICE}.StreamTurn",
            "a method",
            "rpc StreamTurn ( .general_agent.v1.StreamTurnRequest )"
            " returns ( stream .general_agent.v1.StreamTurnResponse );",
        ),
        (f"{HEALTH}.Check", "a method", "rpc Check ( .grpc.health.v1.HealthCheckRequest )"),
        (HEALTH, "a service", "service Health {"),
        ("general_agent.v1.Session", "a message", "message Session {"),
        ("general_agent.v1.SessionMode", "an enum", "SESSION_MODE_CODING = 2;"),
        (
            "google.protobuf.Struct.FieldsEntry",  # a nested message
            "the entry type for a map field",
            "map<string, .google.protobuf.Value> fields = 1;",
        ),
    ],
)
def test_describe_resolves_each_kind_of_symbol(
    grpcurl: str, server_process: ServerProcess, symbol: str, kind: str, declaration: str
) -> None:
    result = run_grpcurl(grpcurl, server_process, "describe", symbol)

    details = describe_run(result, server_process)
    assert result.returncode == 0, details
    assert f"{symbol} is {kind}:" in result.stdout, details
    assert declaration in result.stdout, details


def test_describe_of_an_unknown_method_says_so(grpcurl: str, server_process: ServerProcess) -> None:
    result = run_grpcurl(grpcurl, server_process, "describe", f"{SERVICE}.NoSuchMethod")

    details = describe_run(result, server_process)
    assert result.returncode != 0, details
    assert f"Symbol not found: {SERVICE}.NoSuchMethod" in result.stderr, details


def test_create_then_get_session(grpcurl: str, server_process: ServerProcess) -> None:
    request = {
        "session": {
            "identity": {"sessionKey": "from-grpcurl", "mode": "SESSION_MODE_CODING"},
            "systemPrompt": "x",
        }
    }
    created = ok_json(
        run_grpcurl(grpcurl, server_process, f"{SERVICE}/CreateSession", flags=("-d", json.dumps(request))),
        server_process,
    )

    session = created["session"]
    identity = session["identity"]
    assert field(identity, "session_key") == "from-grpcurl", created
    assert identity["mode"] == "SESSION_MODE_CODING", created
    session_id = field(identity, "session_id")
    assert isinstance(session_id, str), created
    assert session_id, created
    assert field(session, "system_prompt") == "x", created

    fetched = ok_json(
        run_grpcurl(
            grpcurl, server_process, f"{SERVICE}/GetSession", flags=("-d", json.dumps({"sessionId": session_id}))
        ),
        server_process,
    )

    fetched_identity = fetched["session"]["identity"]
    assert field(fetched_identity, "session_id") == session_id, fetched
    assert field(fetched_identity, "session_key") == "from-grpcurl", fetched
    assert fetched_identity["mode"] == "SESSION_MODE_CODING", fetched
    assert field(fetched["session"], "system_prompt") == "x", fetched


@pytest.mark.parametrize("service", ["", SERVICE])
def test_health_check_is_serving(grpcurl: str, server_process: ServerProcess, service: str) -> None:
    result = run_grpcurl(grpcurl, server_process, f"{HEALTH}/Check", flags=("-d", json.dumps({"service": service})))

    assert '"status": "SERVING"' in result.stdout, describe_run(result, server_process)
    assert ok_json(result, server_process) == {"status": "SERVING"}


def test_get_unknown_session_is_not_found_with_reason(grpcurl: str, server_process: ServerProcess) -> None:
    unknown = str(uuid.uuid4())
    request = json.dumps({"sessionId": unknown})

    # Default error output: a human-readable block on stderr, details included.
    result = run_grpcurl(grpcurl, server_process, f"{SERVICE}/GetSession", flags=("-d", request))

    details = describe_run(result, server_process)
    assert result.returncode == GRPCURL_STATUS_EXIT_BASE + NOT_FOUND, details
    output = result.stdout + result.stderr
    assert "Code: NotFound" in output, details
    assert "SESSION_NOT_FOUND" in output, details

    # -format-error: the status as JSON (google.rpc.Status) on stderr, so the details can be checked exactly.
    result = run_grpcurl(grpcurl, server_process, f"{SERVICE}/GetSession", flags=("-format-error", "-d", request))

    details = describe_run(result, server_process)
    assert result.returncode == GRPCURL_STATUS_EXIT_BASE + NOT_FOUND, details
    status = json.loads(result.stderr)
    assert status["code"] == NOT_FOUND, details
    infos = [d for d in status.get("details", []) if d.get("@type") == "type.googleapis.com/google.rpc.ErrorInfo"]
    assert len(infos) == 1, details
    assert infos[0]["reason"] == "SESSION_NOT_FOUND", details
    assert infos[0]["metadata"] == {"session_id": unknown}, details
