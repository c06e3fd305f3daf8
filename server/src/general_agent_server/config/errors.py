"""The errors of a configuration the server cannot use."""


class ConfigError(Exception):
    """The configuration is invalid; the message names the setting."""


class StartError(Exception):
    """Valid settings the server cannot start with: a port it cannot bind, a state_dir it cannot create, a store
    it cannot reach. The message names the setting and the reason; `general-agent serve` prints it as one line and
    exits 1."""
