"""The conformance tests of CheckpointStore: bounded file checkpoints."""

from __future__ import annotations

from general_agent_server.store.port import SessionStore
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import (
    PNG_BYTES,
    make_checkpoint,
    make_session,
    new_id,
    new_tenant,
)
from general_agent_server.store.testing.helpers import add_checkpoints, checkpoint_ids, create


@async_tests
class CheckpointConformance(StoreConformance):
    """Newest first, bounded by count and bytes from the oldest end, scoped by tenant and session."""

    async def test_checkpoints_round_trip_and_list_newest_first(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        first, second = make_checkpoint("a", content=PNG_BYTES), make_checkpoint("b", content=b"", created=2)
        await add_checkpoints(store, tenant, sid, [first, second])

        listed = await store.list_checkpoints(tenant, sid, limit=10)
        assert [c.checkpoint_id for c in listed] == [second.checkpoint_id, first.checkpoint_id]
        assert listed[0].position > listed[1].position
        assert listed == [second.listed(listed[0].position), first.listed(listed[1].position)]
        assert listed[1].stored_bytes == len(PNG_BYTES)
        # Loading down to the oldest returns both with their contents, newest first.
        assert await store.load_checkpoints_down_to(tenant, sid, first.checkpoint_id) == [second, first]

    async def test_list_checkpoints_pages_before_a_position(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        checkpoints = [make_checkpoint(str(i), created=i) for i in range(5)]
        await add_checkpoints(store, tenant, sid, checkpoints)
        newest_ids = [c.checkpoint_id for c in reversed(checkpoints)]

        page = await store.list_checkpoints(tenant, sid, limit=2)
        assert [c.checkpoint_id for c in page] == newest_ids[:2]
        rest = await store.list_checkpoints(tenant, sid, before_position=page[-1].position, limit=10)
        assert [c.checkpoint_id for c in rest] == newest_ids[2:]

    async def test_checkpoint_bound_by_count_drops_the_oldest(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        checkpoints = [make_checkpoint(str(i), created=i) for i in range(5)]
        dropped: list[str] = []
        for checkpoint in checkpoints:
            dropped += await store.add_checkpoint(tenant, sid, checkpoint, max_count=3, max_bytes=1 << 30)

        assert dropped == [checkpoints[0].checkpoint_id, checkpoints[1].checkpoint_id]
        assert await checkpoint_ids(store, tenant, sid) == [c.checkpoint_id for c in reversed(checkpoints[2:])]
        assert await store.load_checkpoints_down_to(tenant, sid, checkpoints[1].checkpoint_id) == []

    async def test_checkpoint_bound_by_bytes_drops_the_oldest(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        checkpoints = [make_checkpoint(str(i), content=b"x" * 10, created=i) for i in range(3)]
        await add_checkpoints(store, tenant, sid, checkpoints[:2], max_bytes=25)
        dropped = await store.add_checkpoint(tenant, sid, checkpoints[2], max_count=100, max_bytes=25)

        assert dropped == [checkpoints[0].checkpoint_id]
        assert await checkpoint_ids(store, tenant, sid) == [checkpoints[2].checkpoint_id, checkpoints[1].checkpoint_id]

    async def test_a_checkpoint_larger_than_the_byte_bound_drops_everything(self, store: SessionStore) -> None:
        """The chain must stay contiguous from the newest end, so a too-large newest one goes too."""
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        small, huge = make_checkpoint("small", content=b"x"), make_checkpoint("huge", content=b"y" * 100, created=2)
        await add_checkpoints(store, tenant, sid, [small], max_bytes=50)
        dropped = await store.add_checkpoint(tenant, sid, huge, max_count=100, max_bytes=50)

        assert dropped == [small.checkpoint_id, huge.checkpoint_id]
        assert await checkpoint_ids(store, tenant, sid) == []

    async def test_load_down_to_and_delete_checkpoints(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        checkpoints = [make_checkpoint(str(i), created=i) for i in range(4)]
        await add_checkpoints(store, tenant, sid, checkpoints)

        down_to = await store.load_checkpoints_down_to(tenant, sid, checkpoints[1].checkpoint_id)
        assert down_to == [checkpoints[3], checkpoints[2], checkpoints[1]]
        assert await store.load_checkpoints_down_to(tenant, sid, "no-such-checkpoint") == []

        await store.delete_checkpoints(tenant, sid, [c.checkpoint_id for c in down_to])
        assert await checkpoint_ids(store, tenant, sid) == [checkpoints[0].checkpoint_id]
        assert await store.load_checkpoints_down_to(tenant, sid, checkpoints[0].checkpoint_id) == [checkpoints[0]]

    async def test_checkpoints_are_scoped_by_tenant_and_session(self, store: SessionStore) -> None:
        tenant, other_tenant, sid, other_sid = new_tenant(), new_tenant(), new_id(), new_id()
        for t, s in ((tenant, sid), (other_tenant, sid), (tenant, other_sid)):
            await create(store, make_session(t, s))
        mine = make_checkpoint("mine")
        await add_checkpoints(store, tenant, sid, [mine])

        assert await checkpoint_ids(store, other_tenant, sid) == []
        assert await checkpoint_ids(store, tenant, other_sid) == []
        assert await store.load_checkpoints_down_to(other_tenant, sid, mine.checkpoint_id) == []
        assert await store.load_checkpoints_down_to(tenant, other_sid, mine.checkpoint_id) == []
        await store.delete_checkpoints(other_tenant, sid, [mine.checkpoint_id])
        await store.delete_checkpoints(tenant, other_sid, [mine.checkpoint_id])
        assert await checkpoint_ids(store, tenant, sid) == [mine.checkpoint_id]
        # Bounds count per session: a full session elsewhere drops nothing here.
        await add_checkpoints(store, other_tenant, sid, [make_checkpoint("x"), make_checkpoint("y")], max_count=1)
        assert await checkpoint_ids(store, tenant, sid) == [mine.checkpoint_id]

    async def test_add_checkpoint_to_an_unknown_session_stores_nothing(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        assert await store.add_checkpoint(tenant, sid, make_checkpoint("a"), max_count=10, max_bytes=1000) == []
        await create(store, make_session(tenant, sid))
        assert await checkpoint_ids(store, tenant, sid) == []

    async def test_delete_session_removes_its_checkpoints(self, store: SessionStore) -> None:
        tenant, sid, keep = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid))
        await create(store, make_session(tenant, keep))
        gone, kept = make_checkpoint("gone"), make_checkpoint("kept")
        await add_checkpoints(store, tenant, sid, [gone])
        await add_checkpoints(store, tenant, keep, [kept])

        assert await store.delete_session(tenant, sid) is True
        assert await checkpoint_ids(store, tenant, sid) == []
        assert await store.load_checkpoints_down_to(tenant, sid, gone.checkpoint_id) == []
        assert await checkpoint_ids(store, tenant, keep) == [kept.checkpoint_id]
        # A session re-created under the same id starts without checkpoints.
        await create(store, make_session(tenant, sid))
        assert await checkpoint_ids(store, tenant, sid) == []
