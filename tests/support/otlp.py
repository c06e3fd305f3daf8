"""A fake OTLP/gRPC trace collector: servers started with `tracing = "otlp"` export their spans to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.endpoint = ""

    async def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.spans.extend(scope.spans)
        return trace_service_pb2.ExportTraceServiceResponse()

    def env(self) -> dict[str, str]:
        """The standard exporter variables that point a server's OTLP exporter here."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_EXPORTER_OTLP_INSECURE": "true"}


@asynccontextmanager
async def collector() -> AsyncIterator[Collector]:
    found = Collector()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(found, server)  # type: ignore[no-untyped-call]
    found.endpoint = f"http://127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    try:
        yield found
    finally:
        await server.stop(None)
