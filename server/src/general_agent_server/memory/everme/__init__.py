"""The EverMe backend (docs/memory.md, "The EverMe backend"): configuration, HTTP transport, batching."""
