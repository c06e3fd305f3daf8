"""OpenTelemetry tracing (docs/observability.md), on with `tracing = "otlp"` (the OTLP/gRPC exporter, configured
by the standard OTEL_EXPORTER_OTLP_* variables) or `"console"`. A tracer provider of the server's own (never
the process-global one): the gRPC instrumentation's server interceptor opens a span per RPC, its client
interceptors carry the trace context to hook services, and the observer below adds a span per model call, tool
call and hook handler under the span of the RPC whose run made them (a run's task inherits its context)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

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

    def client_interceptors(self) -> list[Any]:
        return list(aio_client_interceptors(tracer_provider=self.provider))  # type: ignore[no-untyped-call]

    def stop(self) -> None:
        """Exports what is buffered, then stops."""
        self.provider.shutdown()


def start_tracing(mode: str) -> Tracing:
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(_exporter(mode)))
    return Tracing(provider)


class TracingObserver:
    """Spans of what already happened (observability/port.py reports when a call ends): each starts `seconds`
    before now, as a child of the current span."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

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

    def tool_call(self, tool: str, seconds: float, failed: bool) -> None:
        self._span(f"tool {tool}", seconds, {"general_agent.tool": tool}, failed)

    def hook_call(self, hook: str, seconds: float, failed: bool) -> None:
        self._span(f"hook {hook}", seconds, {"general_agent.hook": hook}, failed)

    def run_ended(self, outcome: str) -> None:
        span = self._tracer.start_span("run_finished", attributes={"general_agent.outcome": outcome})
        span.end()

    def store_commit(self, seconds: float, batch_size: int) -> None:
        pass  # not tied to one turn
