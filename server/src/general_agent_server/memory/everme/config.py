"""Where the EverMe backend's gateway and credentials come from (docs/memory.md, "The EverMe backend"): the
process environment and an env file, never a flag.

The env file fills only the keys the shell did not set, except `EVERME_AGENT_TOKEN` and `EVERME_AGENT_ID`,
where the file wins: the installer rewrites the file when it rotates the credential, and a stale export in the
shell must not shadow the new one.

The device route file (`$EVERME_MEMORY_HOME/route.json`, by default `~/.everme/memory/route.json`) is read per
request. While it says `{"mode": "local"}`, every request goes to its loopback gateway, whatever the API base
says. It fails closed: a route file that cannot be read or parsed, or that names a gateway off this machine,
still sends to the default loopback gateway, never to the cloud."""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from general_agent_server.security.redaction import register_secret

DEFAULT_API_BASE = "https://api.everme.evermind.ai"
DEFAULT_DEVICE_GATEWAY = "http://127.0.0.1:18790"
FILE_WINS = frozenset({"EVERME_AGENT_TOKEN", "EVERME_AGENT_ID"})
KEYS = (
    "EVERME_API_BASE",
    "EVERME_AGENT_TOKEN",
    "EVERME_AGENT_ID",
    "EVERME_API_KEY",
    "EVERME_MEMORY_HOME",
    "EVERME_FLUSH_EVERY_TURNS",
)


class EverMeConfigError(Exception):
    """The EverMe configuration cannot be used; the message names the key."""


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; `#` comments and blank lines skipped, `export ` and one pair of quotes removed."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def merged_environment(environ: Mapping[str, str], env_file: Path | None) -> dict[str, str]:
    """The EverMe keys from the shell and the env file, with the file's precedence rule applied."""
    merged = {key: environ[key] for key in KEYS if environ.get(key)}
    if env_file is None:
        return merged
    try:
        from_file = read_env_file(env_file)
    except OSError as exc:
        raise EverMeConfigError(f"EVERME_ENV_FILE: cannot read {env_file}: {exc.strerror}") from None
    for key in KEYS:
        value = from_file.get(key)
        if value and (key in FILE_WINS or key not in merged):
            merged[key] = value
    return merged


def normalise_base(url: str) -> str:
    """Trailing slashes trimmed, `/api/v1` appended unless already there."""
    base = url.strip().rstrip("/")
    return base if base.endswith("/api/v1") else base + "/api/v1"


@dataclass(frozen=True, kw_only=True)
class EverMeConfig:
    api_base: str = normalise_base(DEFAULT_API_BASE)
    token: str = field(default="", repr=False)
    agent_id: str = ""
    route_file: Path | None = None
    device_gateway: str = DEFAULT_DEVICE_GATEWAY
    flush_every_turns: int = 5

    @property
    def can_write(self) -> bool:
        """Writes need an agent token (evt_) and an agent id; an API key (emk_) only reads."""
        return self.token.startswith("evt_") and bool(self.agent_id)


def load_config(environ: Mapping[str, str], env_file: Path | None) -> EverMeConfig:
    values = merged_environment(environ, env_file)
    token = register_secret(values.get("EVERME_AGENT_TOKEN") or values.get("EVERME_API_KEY") or "")
    register_secret(values.get("EVERME_API_KEY", ""))
    base = values.get("EVERME_API_BASE") or DEFAULT_API_BASE
    if urlsplit(base).scheme not in ("http", "https"):
        raise EverMeConfigError(f"EVERME_API_BASE: expected an http(s) URL, got {base!r}")
    flush = values.get("EVERME_FLUSH_EVERY_TURNS", "5").strip()
    if not flush.isdigit():
        raise EverMeConfigError(f"EVERME_FLUSH_EVERY_TURNS: expected a whole number, got {flush!r}")
    home = values.get("EVERME_MEMORY_HOME")
    route = Path(home) / "route.json" if home else Path.home() / ".everme" / "memory" / "route.json"
    return EverMeConfig(
        api_base=normalise_base(base),
        token=token,
        agent_id=values.get("EVERME_AGENT_ID", ""),
        route_file=route,
        flush_every_turns=int(flush),
    )


def _loopback(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def routed_base(config: EverMeConfig) -> str:
    """The API base this request goes to: the cloud base without a local route, the route's loopback gateway
    with one, and the default loopback gateway when the route file is unusable (fails closed)."""
    path = config.route_file
    if path is None:
        return config.api_base
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return config.api_base
    except OSError:
        return normalise_base(config.device_gateway)
    try:
        route = json.loads(raw)
    except ValueError:
        return normalise_base(config.device_gateway)
    if not isinstance(route, dict):
        return normalise_base(config.device_gateway)
    if route.get("mode") != "local":
        return config.api_base
    gateway = route.get("gateway") or config.device_gateway
    if not isinstance(gateway, str) or not _loopback(gateway):
        return normalise_base(config.device_gateway)
    return normalise_base(gateway)


def env_file_path(setting: str, environ: Mapping[str, str]) -> Path | None:
    """The env file: the setting, else EVERME_ENV_FILE, else none."""
    chosen = setting or environ.get("EVERME_ENV_FILE", "")
    return Path(os.path.expanduser(chosen)) if chosen else None
