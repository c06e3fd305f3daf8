"""Generated general_agent.v1 messages and stubs (see `make generate`); this file is hand-written."""
