"""The PostgreSQL SessionStore: `store.py` (the class and its reads), `reads.py` (row mapping of reads),
`writer.py` (the ordered writer), `writes.py` (a WriteBatch and the operations beside it), `schema.py` (the
migrations) and `dsn.py` (the `store` URL)."""

from general_agent_server.store.postgres.dsn import DsnError, StoreDsn, is_postgres_url, parse_store_url
from general_agent_server.store.postgres.store import PostgresSessionStore

__all__ = ["DsnError", "PostgresSessionStore", "StoreDsn", "is_postgres_url", "parse_store_url"]
