"""The conformance tests of SessionLogReader: history, transcript and event log reads, and event retention."""

from __future__ import annotations

import pytest

from general_agent_server.domain.content import ImagePart
from general_agent_server.domain.events import AssistantDelta
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.transcript import MessageEntry, SessionResetEntry, TranscriptEntry
from general_agent_server.store.port import SessionStore, StoreError, WriteBatch
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import (
    PNG_BYTES,
    at,
    bump,
    make_entry,
    make_event,
    make_message,
    make_session,
    new_id,
    new_tenant,
    varied_event_bodies,
    varied_transcript_bodies,
)
from general_agent_server.store.testing.helpers import all_events, all_transcript, create, without_entry_ids


@async_tests
class SessionLogConformance(StoreConformance):
    """load_history, read_transcript, count_transcript, read_events, oldest_event_sequence, newest_event_sequences,
    purge_events."""

    async def test_history_appends_at_base_and_loads_in_order(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        messages = [make_message(i) for i in range(5)]

        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=messages[:2], history_base=0))
        assert await store.load_history(tenant, sid) == messages[:2]

        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=messages[2:4], history_base=2))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=messages[4:], history_base=4))

        loaded = await store.load_history(tenant, sid)
        assert loaded == messages
        assert [m.role for m in loaded] == ["user", "assistant", "user", "assistant", "user"]
        assert loaded[1].content[0] == {"type": "thinking", "thinking": "thought 1", "signature": "sig-1=="}
        assert loaded[1].model_ref == "anthropic/claude-test"
        assert loaded[1].format_version == 1

    async def test_history_is_per_session(self, store: SessionStore) -> None:
        tenant, sid_a, sid_b = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid_a))
        await create(store, make_session(tenant, sid_b))
        await store.write(WriteBatch(tenant=tenant, session_id=sid_a, history=[make_message(0, run_id="a")]))
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid_b,
                history=[make_message(0, run_id="b"), make_message(1, run_id="b")],
            )
        )
        assert await store.load_history(tenant, sid_a) == [make_message(0, run_id="a")]
        assert await store.load_history(tenant, sid_b) == [make_message(0, run_id="b"), make_message(1, run_id="b")]

    async def test_replace_history_replaces_the_whole_history(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=[make_message(i) for i in range(4)]))

        summary = HistoryMessage(role="user", content=({"type": "text", "text": "summary of 4"},), run_id="c")
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid, history=[summary], history_base=0, replace_history=True)
        )
        assert await store.load_history(tenant, sid) == [summary]

        # Replacing with nothing clears it (ResetSession).
        await store.write(WriteBatch(tenant=tenant, session_id=sid, replace_history=True))
        assert await store.load_history(tenant, sid) == []

    async def test_load_history_of_unknown_session_is_empty(self, store: SessionStore) -> None:
        assert await store.load_history(new_tenant(), new_id()) == []

    async def test_load_history_sized_reports_the_stored_size(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.load_history_sized(tenant, sid) == ([], 0)
        small = make_message(0)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=[small]))
        messages, size = await store.load_history_sized(tenant, sid)
        assert messages == [small]
        assert size >= len("message 0")
        big = HistoryMessage(role="assistant", content=({"type": "text", "text": "x" * 100_000},), run_id="run-1")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=[big], history_base=1))
        messages, grown = await store.load_history_sized(tenant, sid)
        assert messages == [small, big]
        assert 100_000 < grown - size < 101_000
        assert await store.load_history_sized(new_tenant(), new_id()) == ([], 0)

    async def test_transcript_round_trips_and_assigns_increasing_entry_ids(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        entries = [make_entry(i + 1, body) for i, body in enumerate(varied_transcript_bodies())]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=entries[:3]))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=entries[3:]))

        stored = await all_transcript(store, tenant, sid)

        assert without_entry_ids(stored) == entries
        ids = [e.entry_id for e in stored]
        assert all(i > 0 for i in ids)
        assert ids == sorted(set(ids))
        assert stored[0].timestamp == at(1)
        assert stored[0].timestamp.microsecond == 123456
        body = stored[1].body
        assert isinstance(body, MessageEntry)
        assert body.content[1] == ImagePart(mime_type="image/png", data=PNG_BYTES)

    async def test_read_transcript_pages_by_entry_id_and_limit(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        entries = [make_entry(i) for i in range(1, 8)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=entries))
        everything = await all_transcript(store, tenant, sid)
        assert len(everything) == 7

        pages: list[list[TranscriptEntry]] = []
        after = 0
        while True:
            page = await store.read_transcript(tenant, sid, after_entry_id=after, limit=3)
            if not page:
                break
            pages.append(page)
            after = page[-1].entry_id

        assert [len(p) for p in pages] == [3, 3, 1]
        assert [e for p in pages for e in p] == everything
        assert without_entry_ids([e for p in pages for e in p]) == entries

        # after_entry_id is exclusive.
        third = everything[2].entry_id
        assert await store.read_transcript(tenant, sid, after_entry_id=third, limit=2) == everything[3:5]
        assert await store.read_transcript(tenant, sid, after_entry_id=everything[-1].entry_id, limit=10) == []
        assert await store.read_transcript(tenant, sid, after_entry_id=0, limit=1) == everything[:1]

    async def test_transcript_is_per_session(self, store: SessionStore) -> None:
        tenant, sid_a, sid_b = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid_a))
        await create(store, make_session(tenant, sid_b))
        await store.write(WriteBatch(tenant=tenant, session_id=sid_a, transcript=[make_entry(1, run_id="a")]))
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid_b, transcript=[make_entry(1, run_id="b"), make_entry(2)])
        )
        await store.write(WriteBatch(tenant=tenant, session_id=sid_a, transcript=[make_entry(2, run_id="a")]))

        assert without_entry_ids(await all_transcript(store, tenant, sid_a)) == [
            make_entry(1, run_id="a"),
            make_entry(2, run_id="a"),
        ]
        assert await store.count_transcript(tenant, sid_a) == 2
        assert await store.count_transcript(tenant, sid_b) == 2

    async def test_count_transcript(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.count_transcript(tenant, sid) == 0
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=[make_entry(1), make_entry(2)]))
        assert await store.count_transcript(tenant, sid) == 2
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=[make_entry(3)]))
        assert await store.count_transcript(tenant, sid) == 3
        assert await store.count_transcript(new_tenant(), sid) == 0

    async def test_clear_transcript(self, store: SessionStore) -> None:
        tenant, sid, other = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid))
        await create(store, make_session(tenant, other))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=[make_entry(1), make_entry(2)]))
        await store.write(WriteBatch(tenant=tenant, session_id=other, transcript=[make_entry(1)]))
        before = await all_transcript(store, tenant, sid)

        await store.write(WriteBatch(tenant=tenant, session_id=sid, clear_transcript=True))

        assert await store.count_transcript(tenant, sid) == 0
        assert await all_transcript(store, tenant, sid) == []
        assert await store.count_transcript(tenant, other) == 1

        # Entries written with the clear land after it; entry ids are never reused, so an old page
        # position cannot skip or repeat new entries.
        fresh = make_entry(3, SessionResetEntry(reason="manual"))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, clear_transcript=True, transcript=[fresh]))
        after = await all_transcript(store, tenant, sid)
        assert without_entry_ids(after) == [fresh]
        assert after[0].entry_id > max(e.entry_id for e in before)

    async def test_events_round_trip_in_sequence_order(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        events = [make_event(sid, i + 1, body) for i, body in enumerate(varied_event_bodies())]
        # Written out of order and across batches: reads order by sequence.
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[events[3], events[0], events[2]]))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[events[1], *events[4:]]))

        stored = await all_events(store, tenant, sid)

        assert stored == events
        assert [e.sequence for e in stored] == list(range(1, len(events) + 1))
        assert stored[0].create_time == at(1)
        assert stored[0].create_time.microsecond == 123456

    async def test_read_events_after_sequence_and_limit(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        events = [make_event(sid, i) for i in range(1, 11)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=events))

        assert await store.read_events(tenant, sid, after_sequence=0, limit=3) == events[:3]
        assert await store.read_events(tenant, sid, after_sequence=3, limit=3) == events[3:6]
        assert await store.read_events(tenant, sid, after_sequence=8, limit=5) == events[8:]
        assert await store.read_events(tenant, sid, after_sequence=10, limit=5) == []
        assert await store.read_events(tenant, sid, after_sequence=0, limit=100) == events

    async def test_read_events_with_gaps(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        events = [make_event(sid, s) for s in (5, 6, 9, 20)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=events))

        assert await store.read_events(tenant, sid, after_sequence=0, limit=2) == events[:2]
        assert await store.read_events(tenant, sid, after_sequence=6, limit=10) == events[2:]
        assert await store.read_events(tenant, sid, after_sequence=7, limit=1) == [events[2]]

    async def test_events_are_per_session_and_tenant(self, store: SessionStore) -> None:
        tenant, other_tenant, sid_a, sid_b = new_tenant(), new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid_a))
        await create(store, make_session(tenant, sid_b))
        await store.write(WriteBatch(tenant=tenant, session_id=sid_a, events=[make_event(sid_a, 1)]))
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid_b, events=[make_event(sid_b, 1), make_event(sid_b, 2)])
        )

        assert await all_events(store, tenant, sid_a) == [make_event(sid_a, 1)]
        assert await all_events(store, tenant, sid_b) == [make_event(sid_b, 1), make_event(sid_b, 2)]
        assert await all_events(store, other_tenant, sid_a) == []

    async def test_oldest_event_sequence(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.oldest_event_sequence(tenant, sid) is None

        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 12), make_event(sid, 13)]))
        assert await store.oldest_event_sequence(tenant, sid) == 12
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 14)]))
        assert await store.oldest_event_sequence(tenant, sid) == 12
        assert await store.oldest_event_sequence(new_tenant(), sid) is None
        assert await store.oldest_event_sequence(tenant, new_id()) is None

    async def test_newest_event_sequences_answers_many_sessions_at_once(self, store: SessionStore) -> None:
        tenant, other_tenant = new_tenant(), new_tenant()
        sids = [new_id() for _ in range(3)]
        for sid in sids:
            await create(store, make_session(tenant, sid))
        await create(store, make_session(other_tenant, sids[0]))
        await store.write(WriteBatch(tenant=tenant, session_id=sids[0], events=[make_event(sids[0], 3)]))
        await store.write(
            WriteBatch(tenant=tenant, session_id=sids[1], events=[make_event(sids[1], 1), make_event(sids[1], 9)])
        )
        await store.write(WriteBatch(tenant=other_tenant, session_id=sids[0], events=[make_event(sids[0], 40)]))
        unknown = (tenant, new_id())

        keys = [(tenant, sid) for sid in sids] + [(other_tenant, sids[0]), unknown, (tenant, sids[1])]
        assert await store.newest_event_sequences(keys) == {
            (tenant, sids[0]): 3,
            (tenant, sids[1]): 9,
            (other_tenant, sids[0]): 40,
        }
        assert await store.newest_event_sequences([]) == {}
        await store.write(WriteBatch(tenant=tenant, session_id=sids[2], events=[make_event(sids[2], 5)]))
        assert await store.newest_event_sequences([(tenant, sids[2])]) == {(tenant, sids[2]): 5}

    async def test_newest_event_sequences_over_a_thousand_sessions(self, store: SessionStore) -> None:
        tenant = new_tenant()
        sids = [new_id() for _ in range(1001)]
        for sid in sids[:2] + sids[-2:]:
            await create(store, make_session(tenant, sid))
            await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 7)]))
        newest = await store.newest_event_sequences([(tenant, sid) for sid in sids])
        assert newest == {(tenant, sid): 7 for sid in sids[:2] + sids[-2:]}

    async def test_purge_events_keeps_the_newest_by_count(self, store: SessionStore) -> None:
        tenant, sid, other = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid))
        await create(store, make_session(tenant, other))
        events = [make_event(sid, i) for i in range(1, 11)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=events))
        await store.write(WriteBatch(tenant=tenant, session_id=other, events=[make_event(other, 1)]))
        await store.purge_events(tenant, sid, keep_last=3, older_than=at(-1000))
        assert await all_events(store, tenant, sid) == events[7:]
        assert await store.oldest_event_sequence(tenant, sid) == 8
        assert len(await all_events(store, tenant, other)) == 1  # other sessions untouched

    async def test_purge_events_by_age_always_keeps_the_newest(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        events = [make_event(sid, i) for i in range(1, 6)]  # created at T0+1s … T0+5s
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=events))
        await store.purge_events(tenant, sid, keep_last=100, older_than=at(3.5))
        assert await all_events(store, tenant, sid) == events[3:]
        await store.purge_events(tenant, sid, keep_last=100, older_than=at(1000))
        assert await all_events(store, tenant, sid) == events[4:]

    async def test_a_taken_event_sequence_fails_the_whole_batch(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1)]))

        with pytest.raises(StoreError):
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=bump(v1),
                    events=[make_event(sid, 2), make_event(sid, 1, AssistantDelta(text="again"))],
                    transcript=[make_entry(2)],
                    history=[make_message(0)],
                )
            )

        assert await all_events(store, tenant, sid) == [make_event(sid, 1)]
        assert await store.get_session(tenant, sid) == v1
        assert await store.count_transcript(tenant, sid) == 0
        assert await store.load_history(tenant, sid) == []

    async def test_changing_a_written_or_read_message_leaves_the_stored_one_alone(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        written = make_message(1)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=[written]))
        written.content[1]["text"] = "changed after the write"

        read = await store.load_history(tenant, sid)
        read[0].content[1]["text"] = "changed after the read"

        assert await store.load_history(tenant, sid) == [make_message(1)]
