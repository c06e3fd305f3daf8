"""Benchmarks of the agent service against a bare `anthropic` SDK baseline; each benchmark states its target.

Run with `make bench` or `python -m bench [NAME ...] [--quick]` from the repository root. Every
benchmark measures the service and its baseline in the same run, interleaved, with the processes
pinned to fixed cores, and judges the service by ratios; absolute numbers are only logged. Results
are printed and written as JSON to `bench/results/<name>.json`.
"""

import os

# The benchmarks fork their fake model, servers and floor while their own gRPC channels are open; gRPC's fork
# handlers then print a warning at every start and do nothing useful (no child uses the parent's channels).
# Set before anything imports grpc (`python -m bench...` imports this package first).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
