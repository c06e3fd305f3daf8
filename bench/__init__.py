"""Benchmarks of the agent service against a bare `anthropic` SDK baseline; each benchmark states its target.

Run with `make bench` or `python -m bench [NAME ...] [--quick]` from the repository root. Every
benchmark measures the service and its baseline in the same run, interleaved, with the processes
pinned to fixed cores, and judges the service by ratios; absolute numbers are only logged. Results
are printed and written as JSON to `bench/results/<name>.json`.
"""
