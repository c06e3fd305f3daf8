"""The `store` setting for PostgreSQL: `postgresql://user@host:port/db`. A password is never taken from the URL
(it would sit in process listings, shell history and logs): it comes from PGPASSWORD or the
`store_password_file` setting. `redacted` is the form logs and errors show."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any

SCHEMES = ("postgresql", "postgres")


class DsnError(ValueError):
    """The URL is not one this store accepts; the message names the setting."""


@dataclass(frozen=True)
class StoreDsn:
    host: str
    port: int
    user: str
    database: str
    password: str = field(default="", repr=False)
    options: tuple[tuple[str, str], ...] = ()

    @property
    def redacted(self) -> str:
        """The URL without any secret: safe for logs and errors."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"

    def scrub(self, text: str) -> str:
        return text.replace(self.password, "[REDACTED]") if self.password else text

    def connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"host": self.host, "port": self.port, "user": self.user, "database": self.database}
        if self.password:
            kwargs["password"] = self.password
        for key, value in self.options:
            if key == "sslmode":
                kwargs["ssl"] = value
        return kwargs


def is_postgres_url(value: str) -> bool:
    return value.split("://", 1)[0].lower() in SCHEMES and "://" in value


def parse_store_url(value: str, *, password: str = "") -> StoreDsn:
    """Parses the `store` setting; refuses a password in the URL (the error names `store` and never repeats it)."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme.lower() not in SCHEMES:
        raise DsnError("store: expected postgresql://user@host:port/database")
    if parts.password is not None:
        raise DsnError(
            "store: a password in the URL is refused; set PGPASSWORD or the store_password_file setting instead"
        )
    database = parts.path.lstrip("/")
    if not parts.hostname or not parts.username or not database:
        raise DsnError("store: expected postgresql://user@host:port/database (user, host and database are required)")
    try:
        port = parts.port or 5432
    except ValueError:
        raise DsnError("store: the port must be a number") from None
    options = tuple(urllib.parse.parse_qsl(parts.query))
    return StoreDsn(
        host=parts.hostname,
        port=port,
        user=urllib.parse.unquote(parts.username),
        database=urllib.parse.unquote(database),
        password=password,
        options=options,
    )
