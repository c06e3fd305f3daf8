"""Loading the settings: flag > environment (GENERAL_AGENT_*) > TOML file > default.

Secrets are never taken from flags: the default profile's API key comes from ANTHROPIC_API_KEY or a file,
profile keys from a named environment variable or a file, search and scrape keys from their usual variables."""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from general_agent_server.auth.config import AuthConfigError, auth_config, tenant_policies
from general_agent_server.config.checks import ConfigError, validate
from general_agent_server.config.docs import NO_FLAG
from general_agent_server.config.table import INPUT_LIMIT_NAMES, SETTINGS, ServerSettings, Setting
from general_agent_server.domain.errors import ServiceError
from general_agent_server.domain.session import HostedToolDefinition
from general_agent_server.domain.validation import InputLimits, check_hosted_tools
from general_agent_server.model.credentials import AuthProfile
from general_agent_server.security.redaction import register_secret


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML settings file (GENERAL_AGENT_CONFIG).")
    for setting in SETTINGS:
        if setting.name in NO_FLAG:
            continue  # a path, but kept off the command line with the other secrets' settings
        if setting.kind is bool:
            # `--no-NAME` turns off a setting that defaults to true (or that the environment or file set).
            parser.add_argument(setting.flag, action=argparse.BooleanOptionalAction, default=None, help=setting.help)
        else:
            parser.add_argument(setting.flag, default=None, help=f"{setting.help} (default {setting.default!r})")


def _coerce(setting: Setting, value: Any, source: str) -> Any:
    try:
        if setting.kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(value)
        return setting.kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{setting.name} ({source}): invalid {setting.kind.__name__} {value!r}") from None


def load_settings(args: argparse.Namespace | None, environ: Mapping[str, str]) -> ServerSettings:
    config_path = (getattr(args, "config", None) if args else None) or environ.get("GENERAL_AGENT_CONFIG", "")
    file_values: dict[str, Any] = {}
    if config_path:
        try:
            file_values = tomllib.loads(Path(config_path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {config_path}: {exc}") from None
    known = {s.name for s in SETTINGS} | {"auth_profiles", "tenant_default_profiles", "hosted_tools", "auth", "tenants"}
    unknown = sorted(set(file_values) - known)
    if unknown:
        raise ConfigError(f"config file {config_path}: unknown setting(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        value: Any = setting.default
        if setting.name in file_values:
            value = _coerce(setting, file_values[setting.name], f"config file {config_path}")
        if setting.env in environ:
            value = _coerce(setting, environ[setting.env], setting.env)
        flag_value = getattr(args, setting.name, None) if args else None
        if flag_value is not None:
            value = _coerce(setting, flag_value, setting.flag)
        values[setting.name] = value
    limits = InputLimits(**{name: values[name] for name in INPUT_LIMIT_NAMES})
    settings = ServerSettings(
        **values,
        default_profile=_default_profile(values["anthropic_api_key_file"], environ),
        auth_profiles=_profiles(file_values.get("auth_profiles", {}), environ),
        tenant_default_profiles=dict(file_values.get("tenant_default_profiles", {})),
        hosted_tools=_hosted_tools(file_values.get("hosted_tools", []), limits),
        brave_api_key=register_secret(environ.get("BRAVE_API_KEY") or environ.get("BRAVE_SEARCH_API_KEY") or ""),
        firecrawl_api_key=register_secret(environ.get("FIRECRAWL_API_KEY", "").strip()),
        **_trust_tables(file_values, environ),
    )
    validate(settings)
    return settings


def _trust_tables(file_values: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """`[auth]` (tokens and client certificates) and `[tenants.<name>]` (docs/security.md)."""
    try:
        return {
            "auth": auth_config(file_values.get("auth", {}), environ),
            "tenants": tenant_policies(file_values.get("tenants", {})),
        }
    except AuthConfigError as exc:
        raise ConfigError(str(exc)) from None


def _read_secret_file(path: str, what: str) -> str:
    try:
        return register_secret(Path(path).read_text().strip())
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from None


def _check_base_url(url: str | None, what: str) -> str | None:
    if not url:
        return None
    if url.rstrip("/").endswith("/v1"):
        raise ConfigError(f"{what}: base URL must not end in /v1 (the client appends /v1/messages): {url}")
    return url


def _default_profile(key_file: str, environ: Mapping[str, str]) -> AuthProfile:
    key = (
        _read_secret_file(key_file, "anthropic_api_key_file")
        if key_file
        else register_secret(environ.get("ANTHROPIC_API_KEY", ""))
    )
    return AuthProfile(
        profile_id="default",
        api_key=key,
        base_url=_check_base_url(environ.get("ANTHROPIC_BASE_URL"), "ANTHROPIC_BASE_URL"),
    )


def _profiles(raw: Any, environ: Mapping[str, str]) -> dict[str, AuthProfile]:
    if not isinstance(raw, dict):
        raise ConfigError("auth_profiles: must be a table of profiles")
    profiles: dict[str, AuthProfile] = {}
    for profile_id, spec in raw.items():
        where = f"auth_profiles.{profile_id}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: must be a table")
        if "api_key" in spec:
            raise ConfigError(f"{where}: put the key in an environment variable (api_key_env) or a file (api_key_file)")
        key = ""
        if spec.get("api_key_env"):
            key = register_secret(environ.get(str(spec["api_key_env"]), ""))
        elif spec.get("api_key_file"):
            key = _read_secret_file(str(spec["api_key_file"]), f"{where}.api_key_file")
        profiles[profile_id] = AuthProfile(
            profile_id=profile_id,
            api_key=key,
            base_url=_check_base_url(spec.get("base_url"), f"{where}.base_url"),
            allowed_tenants=frozenset(spec.get("allowed_tenants", ())),
        )
    return profiles


def _hosted_tools(raw: Any, limits: InputLimits) -> tuple[HostedToolDefinition, ...]:
    """Server-wide hosted tools from the TOML file: [[hosted_tools]] name, description, input_schema,
    timeout_seconds."""
    if not isinstance(raw, list):
        raise ConfigError("hosted_tools: must be an array of tables")
    tools = []
    for index, spec in enumerate(raw):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ConfigError(f"hosted_tools[{index}]: needs a name")
        timeout = spec.get("timeout_seconds")
        tools.append(
            HostedToolDefinition(
                name=spec["name"],
                description=str(spec.get("description", "")),
                input_schema=spec.get("input_schema", {"type": "object", "properties": {}}),
                timeout_seconds=float(timeout) if timeout is not None else None,
            )
        )
    try:
        check_hosted_tools(tools, field="hosted_tools", limits=limits)
    except ServiceError as exc:
        raise ConfigError(exc.message) from None
    return tuple(tools)
