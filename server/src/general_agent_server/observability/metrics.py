"""Prometheus metrics (docs/observability.md) in a registry of their own, served over HTTP on
`metrics_listen` by prometheus_client's server thread. Label values are bounded sets (RPC methods, status
codes, run outcomes, model ids, tool and hook names), never tenants' ids or free text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from general_agent_server.domain.session import Usage

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class PrometheusMetrics:
    """The Observer (observability/port.py) over prometheus_client."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpc_seconds = Histogram(
            "general_agent_rpc_duration_seconds", "RPC latency by method and status code.",
            ["method", "code"], buckets=_SLOW, registry=r,
        )  # fmt: skip
        self.turns = Counter("general_agent_turns", "Runs ended, by outcome.", ["outcome"], registry=r)
        self.model_seconds = Histogram(
            "general_agent_model_call_duration_seconds", "Model call latency by model and result.",
            ["model", "result"], buckets=_SLOW, registry=r,
        )  # fmt: skip
        self.model_tokens = Counter(
            "general_agent_model_tokens", "Tokens of model calls by model and kind.", ["model", "kind"], registry=r
        )
        self.tool_seconds = Histogram(
            "general_agent_tool_call_duration_seconds", "Tool calls and their latency by tool and result.",
            ["tool", "result"], buckets=_SLOW, registry=r,
        )  # fmt: skip
        self.hook_seconds = Histogram(
            "general_agent_hook_duration_seconds", "Hook handler latency by hook.", ["hook"], buckets=_FAST, registry=r
        )
        self.hook_failures = Counter(
            "general_agent_hook_failures", "Hook handler calls that failed or timed out.", ["hook"], registry=r
        )
        self.commit_seconds = Histogram(
            "general_agent_store_commit_duration_seconds", "Store group-commit latency.", buckets=_FAST, registry=r
        )
        self.commit_batches = Histogram(
            "general_agent_store_commit_batch_size", "Write batches per group commit.", buckets=_BATCH, registry=r
        )
        self.active_runs = Gauge("general_agent_active_runs", "Runs executing now.", registry=r)
        self.queued_turns = Gauge("general_agent_queued_turns", "ENQUEUE turns waiting, all sessions.", registry=r)

    def watch(self, *, active_runs: Callable[[], float], queued_turns: Callable[[], float]) -> None:
        """Gauges read when scraped."""
        self.active_runs.set_function(active_runs)
        self.queued_turns.set_function(queued_turns)

    def rpc(self, method: str, code: str, seconds: float) -> None:
        self.rpc_seconds.labels(method, code).observe(seconds)

    def model_call(self, model: str, seconds: float, usage: Usage | None, failed: bool) -> None:
        self.model_seconds.labels(model, "error" if failed else "ok").observe(seconds)
        if usage is not None:
            for kind, tokens in (
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
                ("cache_read", usage.cache_read_input_tokens),
                ("cache_write", usage.cache_creation_input_tokens),
            ):
                if tokens:
                    self.model_tokens.labels(model, kind).inc(tokens)

    def tool_call(self, tool: str, seconds: float, failed: bool, *, spanned: bool = False) -> None:
        self.tool_seconds.labels(tool, "error" if failed else "ok").observe(seconds)

    def hook_call(self, hook: str, seconds: float, failed: bool) -> None:
        self.hook_seconds.labels(hook).observe(seconds)
        if failed:
            self.hook_failures.labels(hook).inc()

    def run_ended(self, outcome: str) -> None:
        self.turns.labels(outcome).inc()

    def store_commit(self, seconds: float, batch_size: int) -> None:
        self.commit_seconds.observe(seconds)
        self.commit_batches.observe(batch_size)


@dataclass
class MetricsServer:
    """The /metrics HTTP endpoint; `port` is the bound one (port 0 resolved)."""

    address: str
    stop: Callable[[], None]


def serve_metrics(metrics: PrometheusMetrics, listen: str) -> MetricsServer:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    server, thread = start_http_server(int(port), addr=host, registry=metrics.registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return MetricsServer(address=f"{host}:{server.server_port}", stop=stop)
