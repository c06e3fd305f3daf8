"""The tests' throwaway PostgreSQL cluster (tests/support/pg_cluster.py) as a session fixture. A missing
PostgreSQL fails the tests that need it, loudly: it never skips them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from tests.support.pg_cluster import ClusterError, throwaway_cluster


def fresh_database(url: str, prefix: str) -> str:
    """The URL of a new, empty database on the cluster of `url` (one per test keeps their data apart)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """`postgresql://postgres@127.0.0.1:<port>/postgres` of a cluster started for this test session."""
    try:
        with throwaway_cluster() as cluster:
            yield cluster.url
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
