"""Metrics and tracing as the settings ask (metrics_listen, tracing): started before the server serves and
stopped after it; nothing at all when both are off (no observer, no interceptor, no wrapper)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from general_agent_server.config import ServerSettings, StartError
from general_agent_server.observability.fanout import Fanout
from general_agent_server.observability.metrics import MetricsServer, PrometheusMetrics, serve_metrics
from general_agent_server.observability.port import Observer, Spans
from general_agent_server.observability.tracing import Tracing, TracingObserver, start_tracing


@dataclass
class Observability:
    metrics: PrometheusMetrics | None = None
    metrics_server: MetricsServer | None = None
    tracing: Tracing | None = None
    observer: Observer | None = None
    # Open while hook handlers and local tools run, so their calls out carry the trace context (tracing only).
    spans: Spans | None = None

    def server_interceptors(self) -> list[Any]:
        """Before the others: the RPC's span is current while they and the handler run."""
        return [self.tracing.server_interceptor()] if self.tracing is not None else []

    def stop(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None
        if self.tracing is not None:
            self.tracing.stop()
            self.tracing = None


def start_observability(settings: ServerSettings) -> Observability:
    found = Observability()
    observers: list[Observer] = []
    try:
        if settings.metrics_listen:
            found.metrics = PrometheusMetrics()
            try:
                found.metrics_server = serve_metrics(found.metrics, settings.metrics_listen)
            except OSError as exc:
                raise StartError(
                    f"metrics_listen: cannot bind {settings.metrics_listen}: {exc.strerror or exc}"
                ) from None
            observers.append(found.metrics)
        if settings.tracing != "off":
            found.tracing = start_tracing(settings.tracing)
            traced = TracingObserver(found.tracing.tracer)
            observers.append(traced)
            found.spans = traced
    except BaseException:
        found.stop()
        raise
    if observers:
        found.observer = observers[0] if len(observers) == 1 else Fanout(observers)
    return found
