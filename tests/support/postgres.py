"""The tests' throwaway PostgreSQL cluster (tests/support/pg_cluster.py) as a session fixture. A missing
PostgreSQL fails the tests that need it, loudly: it never skips them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.pg_cluster import ClusterError, throwaway_cluster


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """`postgresql://postgres@127.0.0.1:<port>/postgres` of a cluster started for this test session."""
    try:
        with throwaway_cluster() as cluster:
            yield cluster.url
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
