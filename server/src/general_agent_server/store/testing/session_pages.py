"""The conformance tests of SessionRecordStore.list_sessions: order, cursors and filters."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from general_agent_server.domain.session import SessionMode
from general_agent_server.store.port import ListCursor, SessionQuery, SessionStore, WriteBatch, session_ids
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import T0, at, bump, make_session, new_id, new_tenant
from general_agent_server.store.testing.helpers import create, list_ids


@async_tests
class SessionPagesConformance(StoreConformance):
    """list_sessions: update_time desc then session_id, exclusive cursors, literal key prefixes, labels, children."""

    async def test_list_never_shows_another_tenants_sessions(self, store: SessionStore) -> None:
        tenant_a, tenant_b = new_tenant(), new_tenant()
        ids_a = sorted(new_id("a") for _ in range(3))
        ids_b = sorted(new_id("b") for _ in range(2))
        for sid in ids_a:
            await create(store, make_session(tenant_a, sid))
        for sid in ids_b:
            await create(store, make_session(tenant_b, sid))

        assert await list_ids(store, tenant_a) == ids_a
        assert await list_ids(store, tenant_b) == ids_b
        assert await list_ids(store, tenant_a, SessionQuery(include_children=True)) == ids_a
        assert await list_ids(store, new_tenant()) == []

    async def test_list_orders_by_update_time_desc_then_session_id(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-b", update_time=at(10)))
        await create(store, make_session(tenant, "s-old", update_time=at(1)))
        await create(store, make_session(tenant, "s-a", update_time=at(10)))
        await create(store, make_session(tenant, "s-new", update_time=at(20)))
        await create(store, make_session(tenant, "s-c", update_time=at(10)))

        assert await list_ids(store, tenant) == ["s-new", "s-a", "s-b", "s-c", "s-old"]

    async def test_list_order_distinguishes_microseconds(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", update_time=T0))
        await create(store, make_session(tenant, "s-2", update_time=T0 + timedelta(microseconds=1)))
        assert await list_ids(store, tenant) == ["s-2", "s-1"]

    async def test_list_order_follows_updates(self, store: SessionStore) -> None:
        tenant = new_tenant()
        first = await create(store, make_session(tenant, "s-1", update_time=at(1)))
        await create(store, make_session(tenant, "s-2", update_time=at(2)))
        assert await list_ids(store, tenant) == ["s-2", "s-1"]

        await store.write(WriteBatch(tenant=tenant, session_id="s-1", session=bump(first, update_time=at(3))))
        assert await list_ids(store, tenant) == ["s-1", "s-2"]

    async def test_list_respects_limit(self, store: SessionStore) -> None:
        tenant = new_tenant()
        for i in range(5):
            await create(store, make_session(tenant, f"s-{i}", update_time=at(i)))
        page = await store.list_sessions(tenant, SessionQuery(), after=None, limit=2)
        assert session_ids(page) == ["s-4", "s-3"]

    async def test_list_cursor_pages_yield_each_session_exactly_once(self, store: SessionStore) -> None:
        tenant = new_tenant()
        # Ties on update_time straddle page boundaries.
        times = [5, 5, 5, 4, 4, 3, 2, 2, 2, 2, 1]
        expected: list[tuple[datetime, str]] = []
        for i, t in enumerate(times):
            sid = f"s-{(i * 7) % 11:02d}"
            await create(store, make_session(tenant, sid, update_time=at(t)))
            expected.append((at(t), sid))
        expected.sort(key=lambda pair: (-pair[0].timestamp(), pair[1]))
        expected_ids = [sid for _, sid in expected]
        assert await list_ids(store, tenant) == expected_ids

        for page_size in (1, 2, 3, 4, 11, 20):
            seen: list[str] = []
            cursor: ListCursor | None = None
            pages = 0
            while True:
                page = await store.list_sessions(tenant, SessionQuery(), after=cursor, limit=page_size)
                if not page:
                    break
                pages += 1
                assert len(page) <= page_size
                seen.extend(session_ids(page))
                last = page[-1]
                cursor = ListCursor(update_time=last.update_time, session_id=last.session_id)
                assert pages <= len(times) + 1, "paging does not terminate"
            assert seen == expected_ids, f"page_size={page_size}"
            assert len(set(seen)) == len(times)

    async def test_list_cursor_is_strictly_after(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-a", update_time=at(5)))
        await create(store, make_session(tenant, "s-b", update_time=at(5)))
        await create(store, make_session(tenant, "s-c", update_time=at(4)))

        after_a = ListCursor(update_time=at(5), session_id="s-a")
        page = await store.list_sessions(tenant, SessionQuery(), after=after_a, limit=10)
        assert session_ids(page) == ["s-b", "s-c"]
        after_b = ListCursor(update_time=at(5), session_id="s-b")
        page = await store.list_sessions(tenant, SessionQuery(), after=after_b, limit=10)
        assert session_ids(page) == ["s-c"]
        after_c = ListCursor(update_time=at(4), session_id="s-c")
        assert await store.list_sessions(tenant, SessionQuery(), after=after_c, limit=10) == []

    async def test_list_filters_by_session_key_prefix(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", session_key="proj/alpha", update_time=at(4)))
        await create(store, make_session(tenant, "s-2", session_key="proj/beta", update_time=at(3)))
        await create(store, make_session(tenant, "s-3", session_key="other/proj/x", update_time=at(2)))
        await create(store, make_session(tenant, "s-4", session_key="proj", update_time=at(1)))
        await create(store, make_session(tenant, "s-5", session_key="", update_time=at(0)))

        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="proj/")) == ["s-1", "s-2"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="proj")) == ["s-1", "s-2", "s-4"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="proj/alpha")) == ["s-1"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="Proj")) == []
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="nope")) == []
        assert await list_ids(store, tenant, SessionQuery()) == ["s-1", "s-2", "s-3", "s-4", "s-5"]

    async def test_list_key_prefix_is_literal_not_a_pattern(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", session_key="50%_off", update_time=at(3)))
        await create(store, make_session(tenant, "s-2", session_key="50xyoff", update_time=at(2)))
        await create(store, make_session(tenant, "s-3", session_key="a_b", update_time=at(1)))
        await create(store, make_session(tenant, "s-4", session_key="axb", update_time=at(0)))

        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="50%")) == ["s-1"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="a_")) == ["s-3"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="%")) == []

    async def test_list_filters_by_mode(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", mode=SessionMode.CODING, update_time=at(3)))
        await create(store, make_session(tenant, "s-2", mode=SessionMode.GENERAL, update_time=at(2)))
        await create(store, make_session(tenant, "s-3", mode=SessionMode.CODING, update_time=at(1)))

        assert await list_ids(store, tenant, SessionQuery(mode=SessionMode.CODING)) == ["s-1", "s-3"]
        assert await list_ids(store, tenant, SessionQuery(mode=SessionMode.GENERAL)) == ["s-2"]
        assert await list_ids(store, tenant, SessionQuery(mode=None)) == ["s-1", "s-2", "s-3"]

    async def test_list_filters_by_labels_all_must_match(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", labels={"team": "a", "env": "prod"}, update_time=at(4)))
        await create(store, make_session(tenant, "s-2", labels={"team": "a", "env": "dev"}, update_time=at(3)))
        await create(store, make_session(tenant, "s-3", labels={"team": "b", "env": "prod"}, update_time=at(2)))
        await create(store, make_session(tenant, "s-4", labels={}, update_time=at(1)))
        await create(store, make_session(tenant, "s-5", labels={"app.example.com/tier": "gold"}, update_time=at(0)))

        def query(labels: dict[str, str]) -> SessionQuery:
            return SessionQuery(labels=labels)

        assert await list_ids(store, tenant, query({"team": "a"})) == ["s-1", "s-2"]
        assert await list_ids(store, tenant, query({"team": "a", "env": "prod"})) == ["s-1"]
        assert await list_ids(store, tenant, query({"env": "prod"})) == ["s-1", "s-3"]
        assert await list_ids(store, tenant, query({"team": "a", "env": "staging"})) == []
        assert await list_ids(store, tenant, query({"team": "c"})) == []
        assert await list_ids(store, tenant, query({"missing": ""})) == []
        assert await list_ids(store, tenant, query({"app.example.com/tier": "gold"})) == ["s-5"]
        assert await list_ids(store, tenant, query({})) == ["s-1", "s-2", "s-3", "s-4", "s-5"]

    async def test_list_label_filter_follows_updates(self, store: SessionStore) -> None:
        tenant = new_tenant()
        record = await create(store, make_session(tenant, "s-1", labels={"stage": "draft"}))
        new_config = replace(record.config, labels={"stage": "final"})
        await store.write(WriteBatch(tenant=tenant, session_id="s-1", session=bump(record, config=new_config)))

        assert await list_ids(store, tenant, SessionQuery(labels={"stage": "final"})) == ["s-1"]
        assert await list_ids(store, tenant, SessionQuery(labels={"stage": "draft"})) == []

    async def test_list_filters_by_parent_session_id(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "p-1", update_time=at(9)))
        await create(store, make_session(tenant, "p-2", update_time=at(8)))
        await create(store, make_session(tenant, "c-1", parent_session_id="p-1", update_time=at(3)))
        await create(store, make_session(tenant, "c-2", parent_session_id="p-1", update_time=at(4)))
        await create(store, make_session(tenant, "c-3", parent_session_id="p-2", update_time=at(5)))

        assert await list_ids(store, tenant, SessionQuery(parent_session_id="p-1")) == ["c-2", "c-1"]
        assert await list_ids(store, tenant, SessionQuery(parent_session_id="p-2")) == ["c-3"]
        assert await list_ids(store, tenant, SessionQuery(parent_session_id="c-1")) == []

    async def test_list_hides_children_unless_include_children(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "p-1", update_time=at(9)))
        await create(store, make_session(tenant, "c-1", parent_session_id="p-1", update_time=at(10)))
        await create(store, make_session(tenant, "p-2", update_time=at(1)))

        assert await list_ids(store, tenant) == ["p-1", "p-2"]
        assert await list_ids(store, tenant, SessionQuery(include_children=False)) == ["p-1", "p-2"]
        assert await list_ids(store, tenant, SessionQuery(include_children=True)) == ["c-1", "p-1", "p-2"]

    async def test_list_combines_filters(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(
            store,
            make_session(
                tenant, "s-1", session_key="k/1", mode=SessionMode.CODING, labels={"t": "a"}, update_time=at(4)
            ),
        )
        await create(
            store,
            make_session(
                tenant, "s-2", session_key="k/2", mode=SessionMode.GENERAL, labels={"t": "a"}, update_time=at(3)
            ),
        )
        await create(
            store,
            make_session(
                tenant, "s-3", session_key="x/3", mode=SessionMode.CODING, labels={"t": "a"}, update_time=at(2)
            ),
        )
        await create(
            store,
            make_session(
                tenant, "s-4", session_key="k/4", mode=SessionMode.CODING, labels={"t": "b"}, update_time=at(1)
            ),
        )
        query = SessionQuery(session_key_prefix="k/", mode=SessionMode.CODING, labels={"t": "a"})
        assert await list_ids(store, tenant, query) == ["s-1"]
