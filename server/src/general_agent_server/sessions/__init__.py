"""Sessions: the session service, live sessions (state, commits, subscribers), the cache of loaded sessions
with their leases, and idempotency keys."""
