"""Metrics and traces (docs/observability.md): the Observer port the server's parts report to, its Prometheus
implementation served on a port of its own, the metered model client, and OpenTelemetry tracing. All of it is
off unless configured (metrics_listen, tracing), and then costs nothing: the parts hold no observer."""
