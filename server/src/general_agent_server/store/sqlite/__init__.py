"""The SQLite SessionStore: `store.py` (the class and its reads), `writer.py` (the group-commit writer
thread), `batch.py` (a WriteBatch per table), `operations.py` and `checkpoints.py` (writes beside batches),
`rows.py` (row mapping) and `migrations.py` (the schema)."""

from general_agent_server.store.sqlite.store import DB_FILE_NAME, SqliteSessionStore

__all__ = ["DB_FILE_NAME", "SqliteSessionStore"]
