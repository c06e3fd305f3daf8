"""Durable state: the SessionStore port (`port`), the SQLite adapter (`sqlite`), an in-memory one for
in-process tests (`memory`) and the conformance suite every implementation passes (`testing`)."""
