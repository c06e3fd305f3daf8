"""A session's MCP servers (docs/tools.md, MCP): their configuration, one connection task per server through
the official `mcp` SDK, the tools they add to the session, and their life cycle."""
