"""Web tools: web_fetch (SSRF-guarded, readable text) and web_search (Brave or DuckDuckGo)."""
