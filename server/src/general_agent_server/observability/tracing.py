"""OpenTelemetry tracing (docs/observability.md), on with `tracing = "otlp"` (the OTLP/gRPC exporter, configured
by the standard OTEL_EXPORTER_OTLP_* variables) or `"console"`. A tracer provider of the server's own (never
the process-global one): the gRPC instrumentation's server interceptor opens a span per RPC, and the observer
below adds a span per model call, tool call and hook handler under the span of the RPC whose run made them (a
run's task inherits its context). Hook handler calls and local tool calls have their span open while they run
(`hook`, `tool`), so the hook service or MCP server they call is sent that span's trace context (W3C `traceparent`,
`tracestate`: `inject_trace_context`, used by api/hook_client.py and mcp_servers/connection.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.instrumentation.grpc import aio_server_interceptor
from opentelemetry.propagate import inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from general_agent_server.domain.session import Usage

SERVICE_NAME = "general-agent"


def _exporter(mode: str) -> SpanExporter:
    if mode == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    exporter: SpanExporter = OTLPSpanExporter()
    return exporter


@dataclass
class Tracing:
    provider: TracerProvider

    @property
    def tracer(self) -> Tracer:
        return self.provider.get_tracer("general_agent_server")

    def server_interceptor(self) -> Any:
        return aio_server_interceptor(tracer_provider=self.provider)  # type: ignore[no-untyped-call]

    def stop(self) -> None:
        """Exports what is buffered, then stops."""
        self.provider.shutdown()


def start_tracing(mode: str) -> Tracing:
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(_exporter(mode)))
    return Tracing(provider)


def inject_trace_context(carrier: MutableMapping[str, str]) -> None:
    """The current span's trace context into `carrier` (headers, metadata), through the configured propagator
    (W3C trace context and baggage unless OTEL_PROPAGATORS says otherwise). Called only when tracing is on."""
    inject(carrier)


@dataclass(frozen=True, slots=True)
class _Live:
    span: Span

    def failed(self) -> None:
        self.span.set_status(Status(StatusCode.ERROR))


class TracingObserver:
    """Spans of what already happened (observability/port.py reports when a call ends): each starts `seconds`
    before now, as a child of the current span; and spans open while a call runs (`hook`, `tool`: port.py's Spans)."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def _open(self, name: str, attributes: dict[str, str]) -> Iterator[_Live]:
        # No exception event or status text: an exception's text may carry what a tool or hook was given
        # (docs/observability.md). A call's failure is marked with `failed`.
        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            yield _Live(span)

    def hook(self, hook: str, plugin_id: str) -> AbstractContextManager[_Live]:
        return self._open(f"hook {hook}", {"general_agent.hook": hook, "general_agent.plugin_id": plugin_id})

    def tool(self, tool: str) -> AbstractContextManager[_Live]:
        return self._open(f"tool {tool}", {"general_agent.tool": tool})

    def _span(self, name: str, seconds: float, attributes: dict[str, Any], failed: bool) -> None:
        end = time.time_ns()
        span = self._tracer.start_span(name, start_time=end - int(seconds * 1e9), attributes=attributes)
        if failed:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=end)

    def rpc(self, method: str, code: str, seconds: float) -> None:
        pass  # the gRPC instrumentation's span

    def model_call(self, model: str, seconds: float, usage: Usage | None, failed: bool) -> None:
        attributes: dict[str, Any] = {"gen_ai.system": "anthropic", "gen_ai.request.model": model}
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        self._span(f"model {model}", seconds, attributes, failed)

    def tool_call(self, tool: str, seconds: float, failed: bool, *, spanned: bool = False) -> None:
        if not spanned:  # blocked, unknown, refused or hosted: nothing ran here
            self._span(f"tool {tool}", seconds, {"general_agent.tool": tool}, failed)

    def hook_call(self, hook: str, seconds: float, failed: bool) -> None:
        pass  # every handler call runs under its span (`hook`, hooks/runner.py)

    def run_ended(self, outcome: str) -> None:
        span = self._tracer.start_span("run_finished", attributes={"general_agent.outcome": outcome})
        span.end()

    def store_commit(self, seconds: float, batch_size: int) -> None:
        pass  # not tied to one turn
