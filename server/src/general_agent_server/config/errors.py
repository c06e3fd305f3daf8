"""The error of an invalid configuration."""


class ConfigError(Exception):
    """The configuration is invalid; the message names the setting."""
