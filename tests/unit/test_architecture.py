"""The server's shape, checked from its source (docs/architecture.md): the module import graph has no cycles
(lazy and TYPE_CHECKING imports included), protobuf and grpc stop at the transport (api/, app.py), and the
domain package imports nothing of the rest of the server."""

from __future__ import annotations

import ast
from pathlib import Path

import general_agent_server

PACKAGE = Path(general_agent_server.__file__).parent
NAME = "general_agent_server"
# console: the client commands (general-agent sessions ..., chat), a gRPC client of a running server like any host.
TRANSPORT = ("api", "app", "cli", "console")
WIRE_MODULES = ("grpc", "google.protobuf", "google.rpc", "grpc_health", "grpc_reflection", "general_agent.v1")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function bodies and TYPE_CHECKING blocks included). `from
    package import submodule` imports the submodule, not the package's __init__."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(MODULES)
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(node.module)
    return found


def _graph() -> dict[str, set[str]]:
    return {name: {m for m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycles() -> None:
    graph = _graph()
    assert len(graph) > 100  # the scan sees the whole package
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def test_protobuf_and_grpc_stop_at_the_transport() -> None:
    offenders = {
        _module_name(path): sorted(m for m in _imports(path) if m.startswith(WIRE_MODULES))
        for path in PACKAGE.rglob("*.py")
        if _module_name(path).split(".")[1:2] not in ([t] for t in TRANSPORT)
    }
    assert {name: wire for name, wire in offenders.items() if wire} == {}


def test_the_domain_imports_nothing_else_of_the_server() -> None:
    for path in (PACKAGE / "domain").rglob("*.py"):
        inner = {m for m in _imports(path) if m.startswith(f"{NAME}.") and m in MODULES}
        assert all(m.startswith(f"{NAME}.domain") for m in inner), (_module_name(path), sorted(inner))
