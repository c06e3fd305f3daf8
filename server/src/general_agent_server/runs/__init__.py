"""Runs: the one command handler every transport calls (admission, busy policies, hosted results, steering,
stop, cancel), the agent loop, event streams and start-up recovery."""
