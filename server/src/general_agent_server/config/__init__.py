"""Server settings: declared once (config/table.py), loaded from flags, environment and a TOML file
(config/loading.py), checked (config/checks.py) and documented (config/docs.py)."""

from general_agent_server.config.checks import ConfigError
from general_agent_server.config.docs import settings_table_markdown
from general_agent_server.config.errors import StartError
from general_agent_server.config.loading import add_flags, load_settings
from general_agent_server.config.table import MIB, SETTINGS, ServerSettings, Setting, host_list

__all__ = [
    "MIB",
    "SETTINGS",
    "ConfigError",
    "ServerSettings",
    "Setting",
    "StartError",
    "add_flags",
    "host_list",
    "load_settings",
    "settings_table_markdown",
]
