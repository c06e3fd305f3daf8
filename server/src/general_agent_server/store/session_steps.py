"""What both SQL stores put in a session step's compare-and-set UPDATE besides the row (the SQL around it differs
per store, these clauses do not): the lease the step takes or frees, and the message of a step refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from general_agent_server.store.port import WriteBatch
from general_agent_server.store.rows import now_us


class LeaseClauses(NamedTuple):
    """Appended to the UPDATE's SET and WHERE; each part's arguments in the order of its placeholders."""

    set_sql: str
    set_args: tuple[object, ...]
    where_sql: str
    where_args: tuple[object, ...]


_NO_LEASE = LeaseClauses("", (), "", ())


def lease_clauses(batch: WriteBatch, mark: Callable[[], str]) -> LeaseClauses:
    """The clauses for the lease of a step; `mark` gives the next placeholder (called in the order of the SET
    arguments, then the WHERE ones). A take commits only while no other owner holds a live lease; a release frees
    only its owner's lease (SET sees the row as it was, so a take and a release by one owner in one batch leave
    the lease free, as the take then the release would)."""
    if batch.take_lease:
        now = now_us()
        set_sql = ", lease_owner='', lease_expires_us=0"  # taken and freed at once
        set_args: tuple[object, ...] = ()
        if batch.release_lease != batch.take_lease:
            set_sql = f", lease_owner={mark()}, lease_expires_us={mark()}"
            set_args = (batch.take_lease, now + int(batch.lease_ttl_seconds * 1_000_000))
        where = f" AND (lease_owner='' OR lease_owner={mark()} OR lease_expires_us<{mark()})"
        return LeaseClauses(set_sql, set_args, where, (batch.take_lease, now))
    if batch.release_lease:
        owner = batch.release_lease
        freed = (
            f", lease_owner=CASE WHEN lease_owner={mark()} THEN '' ELSE lease_owner END,"
            f" lease_expires_us=CASE WHEN lease_owner={mark()} THEN 0 ELSE lease_expires_us END"
        )
        return LeaseClauses(freed, (owner, owner), "", ())
    return _NO_LEASE


def refused_step(batch: WriteBatch, stored_version: int | None, expected: int) -> str:
    """Why a step wrote nothing, from the version stored when it was refused: its session changed, or another
    owner holds the lease it would take."""
    if stored_version == expected and batch.take_lease:
        return f"session {batch.session_id!r}: another owner holds its lease"
    return f"session {batch.session_id!r}: expected stored version {expected}"
