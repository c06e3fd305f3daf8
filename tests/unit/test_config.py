"""Settings: precedence flag > env > TOML > default, validation with the setting named, secrets never
from flags."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path

import pytest

from general_agent_server.config import (
    SETTINGS,
    ConfigError,
    Setting,
    add_flags,
    load_settings,
    settings_table_markdown,
)
from general_agent_server.config.docs import configuration_page


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(list(argv))


def test_precedence(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('listen = "127.0.0.1:1000"\nlog_level = "DEBUG"\nmax_tokens_cap = 10\n')
    env = {"GENERAL_AGENT_LOG_LEVEL": "WARNING", "GENERAL_AGENT_MAX_TOKENS_CAP": "20"}
    settings = load_settings(parse("--config", str(config), "--max-tokens-cap", "30"), env)
    assert settings.listen == "127.0.0.1:1000"  # file
    assert settings.log_level == "WARNING"  # env over file
    assert settings.max_tokens_cap == 30  # flag over env
    assert load_settings(None, {}).listen == "127.0.0.1:50051"  # default


def test_invalid_values_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GENERAL_AGENT_MAX_TOKENS_CAP"):
        load_settings(None, {"GENERAL_AGENT_MAX_TOKENS_CAP": "lots"})
    with pytest.raises(ConfigError, match="listen"):
        load_settings(None, {"GENERAL_AGENT_LISTEN": "0.0.0.0:1"})
    assert load_settings(None, {"GENERAL_AGENT_LISTEN": "0.0.0.0:1", "GENERAL_AGENT_INSECURE_LISTEN": "true"})
    with pytest.raises(ConfigError, match="ANTHROPIC_BASE_URL"):
        load_settings(None, {"ANTHROPIC_BASE_URL": "https://api.anthropic.com/v1"})
    # grpc would bind 99999 modulo 65536 (34463), a port nobody asked for.
    with pytest.raises(ConfigError, match=r"^listen: port 99999 is out of range \(0-65535"):
        load_settings(None, {"GENERAL_AGENT_LISTEN": "127.0.0.1:99999"})
    with pytest.raises(ConfigError, match=r"^metrics_listen: port 65536 is out of range"):
        load_settings(None, {"GENERAL_AGENT_METRICS_LISTEN": "127.0.0.1:65536"})
    assert load_settings(None, {"GENERAL_AGENT_LISTEN": "127.0.0.1:65535"}).listen == "127.0.0.1:65535"
    with pytest.raises(ConfigError, match=r"^model_http_client: expected aiohttp or httpx, got 'requests'"):
        load_settings(None, {"GENERAL_AGENT_MODEL_HTTP_CLIENT": "requests"})
    assert load_settings(None, {"GENERAL_AGENT_MODEL_HTTP_CLIENT": "httpx"}).model_http_client == "httpx"
    bad = tmp_path / "bad.toml"
    bad.write_text('lisen = "x"\n')
    with pytest.raises(ConfigError, match="unknown setting"):
        load_settings(parse("--config", str(bad)), {})


def test_auth_profiles_from_env_and_files_never_inline(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("file-key\n")
    config = tmp_path / "c.toml"
    config.write_text(
        f"""
[auth_profiles.a]
api_key_env = "A_KEY"
base_url = "http://proxy"
allowed_tenants = ["t1"]
[auth_profiles.b]
api_key_file = "{key_file}"
[tenant_default_profiles]
t1 = "a"
"""
    )
    settings = load_settings(parse("--config", str(config)), {"A_KEY": "env-key", "ANTHROPIC_API_KEY": "default-key"})
    assert settings.auth_profiles["a"].api_key == "env-key"
    assert settings.auth_profiles["a"].allowed_tenants == frozenset({"t1"})
    assert settings.auth_profiles["b"].api_key == "file-key"
    assert settings.default_profile is not None
    assert settings.default_profile.api_key == "default-key"
    assert "env-key" not in repr(settings)
    inline = tmp_path / "inline.toml"
    inline.write_text('[auth_profiles.x]\napi_key = "oops"\n')
    with pytest.raises(ConfigError, match="api_key_env"):
        load_settings(parse("--config", str(inline)), {})


def test_no_flag_for_secrets() -> None:
    with pytest.raises(SystemExit):
        parse("--anthropic-api-key-file", "x")
    assert "GENERAL_AGENT_ANTHROPIC_API_KEY_FILE" in settings_table_markdown()


def test_firecrawl_key_from_the_environment_only() -> None:
    settings = load_settings(None, {"FIRECRAWL_API_KEY": " fc-secret-1234 "})
    assert settings.firecrawl_api_key == "fc-secret-1234"
    assert "fc-secret-1234" not in repr(settings)
    with pytest.raises(SystemExit):
        parse("--firecrawl-api-key", "x")
    assert "FIRECRAWL_API_KEY" in settings_table_markdown()
    with pytest.raises(ConfigError, match="web_fetch_firecrawl_base_url"):
        load_settings(None, {"GENERAL_AGENT_WEB_FETCH_FIRECRAWL_BASE_URL": "api.firecrawl.dev"})
    with pytest.raises(ConfigError, match="web_fetch_firecrawl_timeout_seconds"):
        load_settings(None, {"GENERAL_AGENT_WEB_FETCH_FIRECRAWL_TIMEOUT_SECONDS": "-1"})


def test_input_limits_flow_from_flags_env_and_file_to_the_core(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("max_labels = 5\nmax_hosted_tools = 6\n")
    env = {"GENERAL_AGENT_MAX_SYSTEM_PROMPT_BYTES": "2048", "GENERAL_AGENT_MAX_HOSTED_TOOLS": "7"}
    settings = load_settings(parse("--config", str(config), "--max-hook-registrations", "3"), env)
    limits = settings.core().input_limits
    assert (limits.max_labels, limits.max_hosted_tools, limits.max_system_prompt_bytes) == (5, 7, 2048)
    assert limits.max_hook_registrations == 3
    defaults = load_settings(None, {}).core().input_limits
    assert (defaults.max_system_prompt_bytes, defaults.max_hosted_tool_schema_bytes) == (256 * 1024, 64 * 1024)
    with pytest.raises(ConfigError, match="max_label_value_chars: must be positive"):
        load_settings(None, {"GENERAL_AGENT_MAX_LABEL_VALUE_CHARS": "0"})
    # Server-wide hosted tools from the file are held to the configured limits too.
    tools = tmp_path / "tools.toml"
    tools.write_text('max_hosted_tool_description_bytes = 4\n[[hosted_tools]]\nname = "t"\ndescription = "long"\n')
    assert load_settings(parse("--config", str(tools)), {}).hosted_tools[0].description == "long"
    tools.write_text('max_hosted_tool_description_bytes = 3\n[[hosted_tools]]\nname = "t"\ndescription = "long"\n')
    with pytest.raises(ConfigError, match="max_hosted_tool_description_bytes"):
        load_settings(parse("--config", str(tools)), {})


BOOLEAN_SETTINGS = [s for s in SETTINGS if s.kind is bool]


@pytest.mark.parametrize("setting", BOOLEAN_SETTINGS, ids=lambda s: s.name)
def test_every_boolean_setting_turns_on_and_off_by_flag_env_and_file(setting: Setting, tmp_path: Path) -> None:
    """Each source can set either value, and each overrides the ones below it (flag > env > TOML)."""
    no_flag = "--no-" + setting.flag.removeprefix("--")
    for value in (True, False):
        file = tmp_path / f"{value}.toml"
        file.write_text(f"{setting.name} = {str(value).lower()}\n")
        opposite = {setting.env: str(not value).lower()}
        flag = setting.flag if value else no_flag
        assert getattr(load_settings(parse("--config", str(file)), {}), setting.name) is value
        assert getattr(load_settings(None, {setting.env: str(value).lower()}), setting.name) is value
        assert getattr(load_settings(parse(flag), {}), setting.name) is value
        # env over file, flag over env
        other_file = tmp_path / f"not-{value}.toml"
        other_file.write_text(f"{setting.name} = {str(not value).lower()}\n")
        env_wins = load_settings(parse("--config", str(other_file)), {setting.env: str(value).lower()})
        assert getattr(env_wins, setting.name) is value
        assert getattr(load_settings(parse(flag), opposite), setting.name) is value
    assert getattr(load_settings(parse(), {}), setting.name) is setting.default


def test_the_readme_points_at_the_settings_it_names() -> None:
    """The README shows a few settings and links the generated page for the rest; every setting it names exists
    and every boolean has its `--no-` flag in the table."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "(docs/configuration.md)" in readme
    section = readme[readme.index("## Configuration") :]
    named = set(re.findall(r"^\| `(\w+)`(?:, `(\w+)`)?", section, flags=re.M))
    names = {s.name for s in SETTINGS}
    assert {n for pair in named for n in pair if n} <= names
    assert len(named) >= 4
    for setting in BOOLEAN_SETTINGS:
        assert f"`--no-{setting.flag.removeprefix('--')}`" in settings_table_markdown()


def test_the_configuration_page_is_generated_from_the_table() -> None:
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    assert page == configuration_page(), "docs/configuration.md is stale: run `make docs`"
    for setting in SETTINGS:
        assert f"`{setting.env}`" in page


def test_every_toml_example_of_the_configuration_page_loads(tmp_path: Path) -> None:
    blocks = re.findall(r"```toml\n(.*?)```", configuration_page(), flags=re.S)
    assert len(blocks) >= 1
    config = tmp_path / "config.toml"
    config.write_text("\n".join(blocks))
    pem = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca")}
    for path in pem.values():
        path.write_text("-----BEGIN CERTIFICATE-----\n")  # only their existence is checked at load
    environ = {
        "GENERAL_AGENT_CONFIG": str(config),
        "TEAM_A_ANTHROPIC_KEY": "sk-team-a-0123456789",
        "BILLING_AGENT_TOKEN": "billing-token-0123456789",
        **{f"GENERAL_AGENT_TLS_{name.upper()}_FILE": str(path) for name, path in pem.items()},
    }
    environ["GENERAL_AGENT_TLS_CLIENT_CA_FILE"] = environ.pop("GENERAL_AGENT_TLS_CA_FILE")
    settings = load_settings(None, environ)
    assert settings.auth_profiles["team-a"].allowed_tenants == frozenset({"team-a"})
    assert [t.name for t in settings.hosted_tools] == ["lookup_order"]
    assert [(t.name, t.tenant) for t in settings.auth.tokens] == [("billing-service", "billing")]
    assert settings.tenants["billing"].exec is True


def test_every_setting_reaches_the_core_under_its_own_name() -> None:
    """The domain reads settings under the names the table declares (one name per setting)."""
    core = load_settings(None, {}).core()
    names = {s.name for s in SETTINGS}
    copied = [f.name for f in fields(core) if f.name in names]
    assert len(copied) >= 25
    for name in copied:
        value = getattr(core, name)
        declared = next(s.default for s in SETTINGS if s.name == name)
        if isinstance(value, str | int | float | bool):
            assert value == declared, name
