"""The settings table as documentation: `general-agent settings` and
docs/configuration.md are generated here from config/table.py (a test keeps the files current)."""

from __future__ import annotations

from general_agent_server.config.table import SETTINGS

# Kept off the command line with the other secrets' settings (it names a file holding a key).
NO_FLAG = frozenset({"anthropic_api_key_file", "memory_everme_env_file", "store_password_file", "tls_key_file"})


def settings_table_markdown() -> str:
    """The configuration table (Markdown)."""
    rows = ["| setting | flag | environment | default | meaning |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        flag = "—" if s.name in NO_FLAG else s.flags
        rows.append(f"| `{s.name}` | {flag} | `{s.env}` | `{s.default!r}` | {s.help} |")
    return "\n".join(rows)


_PAGE_HEAD = """# Configuration

One settings table drives the command-line flags, the `GENERAL_AGENT_*` environment variables and the
keys of the optional TOML file (`--config FILE` or `GENERAL_AGENT_CONFIG`). Precedence: flag, then
environment, then file, then the default. Every boolean flag also has a `--no-` form. `general-agent
settings` prints the table below; this page is generated from the same declaration
(`server/src/general_agent_server/config/table.py`) by `make docs`, and a test keeps it current.

Secrets never come from flags or from values in the file: API keys are read from the environment or from
files the file names.

## Settings

"""

_PAGE_TAIL = """

## Credentials and hosted tools

The default auth profile uses `ANTHROPIC_API_KEY` (or the file `anthropic_api_key_file` names) and
`ANTHROPIC_BASE_URL` (which must not end in `/v1`). Further profiles live in the TOML file, each key taken
from an environment variable or a file:

```toml
[auth_profiles.team-a]
api_key_env = "TEAM_A_ANTHROPIC_KEY"   # or api_key_file = "/run/secrets/team-a"
base_url = "https://proxy.internal"    # optional
allowed_tenants = ["team-a"]           # optional; empty = every tenant

[tenant_default_profiles]
team-a = "team-a"

# Hosted tools every session offers (a session adds its own on CreateSession); their names may not be a
# built-in tool's.
[[hosted_tools]]
name = "lookup_order"
description = "Look up an order by id in the shop's database."
timeout_seconds = 300
input_schema = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"] }
```

A session that names `auth_profile_id` is billed to that profile only; an `api_key` given on
`CreateSession` or `ResumeSession` stays in server memory and is never stored, logged or returned.

## Authentication and tenants

Bearer tokens and client certificates live in the TOML file only (never a flag). Each token entry names its
tenant and role and takes the token from exactly one of `token_sha256` (the hex SHA-256 of the token),
`token_env` (an environment variable) or `token_file` (a file); once any entry exists every RPC needs
credentials, and a non-loopback `listen` is allowed. `[tenants.<name>]` tables override the server's
settings for one tenant. docs/security.md explains roles, `x-tenant`, TLS, mutual TLS with
`[[auth.client_certs]]`, and the limits.

```toml
[[auth.tokens]]
name = "billing-service"               # for logs; never the token
tenant = "billing"
role = "tenant"                        # or "admin": the operator, may name another tenant in x-tenant
token_env = "BILLING_AGENT_TOKEN"      # or token_file = "/run/secrets/billing" or token_sha256 = "<64 hex>"

[tenants.billing]
exec = true                            # tenant-role sessions get no exec/process unless enabled here
max_concurrent_runs = 8
max_sessions = 10000
approval_policy = ["mutating"]
```

## Other keys

`BRAVE_API_KEY` (or `BRAVE_SEARCH_API_KEY`) switches `web_search` to Brave; `FIRECRAWL_API_KEY` enables
`web_fetch`'s Firecrawl fallback. Both are read from the environment only.
"""


def configuration_page() -> str:
    """docs/configuration.md."""
    return _PAGE_HEAD + settings_table_markdown() + _PAGE_TAIL
