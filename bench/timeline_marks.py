"""The server side of `python -m bench.timeline`: a mark (tag, perf_counter_ns) at the entry and exit of the
functions a turn passes through, installed by bench/serve_probe.py when BENCH_TIMELINE_FILE is set; SIGUSR2
writes the marks recorded since the previous SIGUSR2 to that file (a JSON list of [tag, ns]) and starts anew.

The points name functions by module and attribute. A point that no longer exists (a function renamed or moved)
stops the server at start-up with its name, so the tool fails instead of leaving a hole in the timeline
(tests/unit/test_bench_timeline.py runs it)."""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Final

# (module, attribute path, tag): an async function gets "tag>" and "tag<", a sync one "tag", an async generator
# "tag>", "tag:<type of each item>" and "tag<".
POINTS: Final = (
    ("general_agent_server.api.turn_rpcs", "TurnRpcs.StreamTurn", "rpc"),
    ("general_agent_server.runs.control", "RunControl.admit", "admit"),
    ("general_agent_server.runs.admission", "prepare_admission", "prepare"),
    ("general_agent_server.runs.admission", "PreparedAdmission.commit", "admission.commit"),
    ("general_agent_server.sessions.ledger", "SessionLedger.commit", "ledger.commit"),
    ("general_agent_server.sessions.ledger", "SessionLedger.publish", "publish"),
    ("general_agent_server.store.group_commit", "GroupCommitLoop._commit", "group.commit"),
    ("general_agent_server.store.sqlite.batch", "apply_write", "apply"),
    ("general_agent_server.runs.driver", "RunDriver.execute", "driver"),
    ("general_agent_server.runs.model_call", "ModelCall._stream_once", "model.call"),
    ("general_agent_server.model.anthropic", "AnthropicModelClient.stream", "model.stream"),
    ("anthropic._base_client", "AsyncAPIClient.post", "sdk.post"),
    # The HTTP request's body and the response's headers, on either HTTP client of the SDK (`model_http_client`):
    # aiohttp (the server's default) or httpx's transport (httpcore).
    ("aiohttp.client_reqrep", "ClientRequest.write_bytes", "http.body"),
    ("aiohttp.client_reqrep", "ClientResponse.start", "http.headers"),
    ("httpcore2._async.http11", "AsyncHTTP11Connection._send_request_body", "http.body"),
    ("httpcore2._async.http11", "AsyncHTTP11Connection._receive_response_headers", "http.headers"),
    ("general_agent_server.runs.tool_round", "ToolRound.run", "round"),
    ("general_agent_server.tools.runtime", "ToolSet.execute", "tool"),
)

_marks: list[tuple[str, int]] = []
_now = time.perf_counter_ns


def _wrapped(function: Callable[..., Any], tag: str) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(function):

        @functools.wraps(function)
        async def generator(*args: Any, **kwargs: Any) -> Any:
            _marks.append((tag + ">", _now()))
            async for item in function(*args, **kwargs):
                _marks.append((f"{tag}:{type(item).__name__}", _now()))
                yield item
            _marks.append((tag + "<", _now()))

        return generator
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def coroutine(*args: Any, **kwargs: Any) -> Any:
            _marks.append((tag + ">", _now()))
            try:
                return await function(*args, **kwargs)
            finally:
                _marks.append((tag + "<", _now()))

        return coroutine

    @functools.wraps(function)
    def plain(*args: Any, **kwargs: Any) -> Any:
        _marks.append((tag, _now()))
        return function(*args, **kwargs)

    return plain


def install(path: Path) -> None:
    """Wraps every point and dumps the marks to `path` on SIGUSR2; wraps nothing when a point is missing (it raises
    with the point's name)."""
    found: list[tuple[str, Any, str, Callable[..., Any], str]] = []
    for module_name, attribute, tag in POINTS:
        *owners, name = attribute.split(".")
        owner: Any = importlib.import_module(module_name)
        for part in owners:
            owner = getattr(owner, part, None)
        function = getattr(owner, name, None)
        if function is None:
            raise SystemExit(f"bench.timeline: {module_name}.{attribute} is gone; update bench/timeline_marks.py")
        found.append((module_name, owner, name, function, tag))
    for module_name, owner, name, function, tag in found:
        wrapper = _wrapped(function, tag)
        setattr(owner, name, wrapper)
        if owner is sys.modules[module_name]:  # a module's function: modules that imported it get the wrapper too
            _rebind_imports(module_name, name, function, wrapper)

    def dump(signum: int, frame: FrameType | None) -> None:
        data, _marks[:] = list(_marks), []
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    signal.signal(signal.SIGUSR2, dump)


def _rebind_imports(module_name: str, name: str, original: object, wrapper: object) -> None:
    package = module_name.split(".")[0]
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith(package) and getattr(loaded, name, None) is original:
            setattr(loaded, name, wrapper)
