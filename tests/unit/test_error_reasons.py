"""Every ErrorInfo reason the server can send is a value of `ErrorReason`, and one reason always leaves with one
canonical code: read off the server's source, every `ServiceError(...)`/`ErrorDetail(...)` construction with a
literal reason, and every reason the run loop derives from `RunReason`."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from general_agent.v1 import error_reason_pb2
from general_agent_server.domain.events import RunReason

SERVER = Path(__file__).resolve().parents[2] / "server" / "src" / "general_agent_server"
WIRE_REASONS = {
    name.removeprefix("ERROR_REASON_")
    for name in error_reason_pb2.ErrorReason.keys()  # noqa: SIM118 (an enum wrapper, not a dict)
    if name != "ERROR_REASON_UNSPECIFIED"
}
# A provider error carries the code its HTTP status maps to (429 RESOURCE_EXHAUSTED, 5xx UNAVAILABLE, ...).
CODE_FROM_CONTEXT = {"PROVIDER_ERROR"}


def _constructions() -> list[tuple[str, str, str]]:
    """(reason, code, where) for every ServiceError/ErrorDetail built with a literal reason string, and every
    call of the validation helper `invalid_argument`."""
    found = []
    for path in SERVER.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            args = {kw.arg: kw.value for kw in node.keywords}
            if name == "invalid_argument":
                # The validation helper: always INVALID_ARGUMENT, reason INVALID_ARGUMENT unless it names one.
                reason_node = args.get("reason")
                reason_value = reason_node.value if isinstance(reason_node, ast.Constant) else "INVALID_ARGUMENT"
                found.append((str(reason_value), "INVALID_ARGUMENT", f"{path.relative_to(SERVER)}:{node.lineno}"))
                continue
            if name not in ("ServiceError", "ErrorDetail"):
                continue
            code = node.args[0] if node.args else args.get("code")
            reason = node.args[1] if len(node.args) > 1 else args.get("reason")
            if isinstance(reason, ast.Constant) and isinstance(reason.value, str):
                code_name = code.attr if isinstance(code, ast.Attribute) else "<computed>"
                found.append((reason.value, code_name, f"{path.relative_to(SERVER)}:{node.lineno}"))
    return found


def test_the_scan_sees_the_server_s_errors() -> None:
    reasons = {reason for reason, _, _ in _constructions()}
    assert {"SESSION_NOT_FOUND", "SESSION_BUSY", "INVALID_ARGUMENT", "NO_API_KEY"} <= reasons


def test_every_literal_reason_is_an_error_reason() -> None:
    unknown = [(reason, where) for reason, _, where in _constructions() if reason not in WIRE_REASONS]
    assert unknown == []


def test_every_run_reason_is_an_error_reason() -> None:
    assert {reason.value for reason in RunReason} <= WIRE_REASONS


def test_one_reason_leaves_with_one_code() -> None:
    codes: dict[str, set[str]] = defaultdict(set)
    places: dict[str, list[str]] = defaultdict(list)
    for reason, code, where in _constructions():
        if reason in CODE_FROM_CONTEXT:
            continue
        codes[reason].add(code)
        places[reason].append(f"{code} at {where}")
    mixed = {reason: places[reason] for reason, seen in codes.items() if len(seen) > 1}
    assert mixed == {}
