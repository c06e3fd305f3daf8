"""The declaration helper of the settings table (config/table.py, config/trust.py)."""

from __future__ import annotations

from dataclasses import field
from typing import TypeVar

T = TypeVar("T")


def setting(default: T, help: str) -> T:
    """A field of ServerSettings that is a setting (flag, environment variable, TOML key)."""
    return field(default=default, metadata={"help": help})
