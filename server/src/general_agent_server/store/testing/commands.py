"""The conformance tests of CommandStore: commands relayed to the holder of a session's lease."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from general_agent_server.store.port import CommandStatus, SessionCommand, SessionStore, WriteBatch
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import make_event, make_session, new_id, new_tenant
from general_agent_server.store.testing.helpers import create
from general_agent_server.store.wakeups import answer_topic, commands_topic, events_topic


def command(tenant: str, session_id: str, body: str = '{"kind":"stop"}') -> SessionCommand:
    return SessionCommand(tenant=tenant, session_id=session_id, command_id=new_id(), body_json=body)


@async_tests
class CommandConformance(StoreConformance):
    """Claimed only by the live lease holder, once; answered, read back, withdrawn only while pending."""

    async def test_only_the_lease_holder_claims_a_command_and_only_once(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        sent = command(tenant, sid)
        await store.put_command(sent)
        assert await store.claim_commands("owner-a") == []  # nobody holds the lease yet
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60)
        assert await store.claim_commands("owner-b") == []
        claimed = await store.claim_commands("owner-a")
        assert [(c.command_id, c.session_id, c.body_json, c.status) for c in claimed] == [
            (sent.command_id, sid, sent.body_json, CommandStatus.CLAIMED)
        ]
        assert await store.claim_commands("owner-a") == []
        assert await store.withdraw_command(tenant, sent.command_id) is False

    async def test_an_answer_is_read_back_and_the_row_deleted(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60)
        sent = command(tenant, sid)
        await store.put_command(sent)
        assert await store.lease_holder(tenant, sid) == "owner-a"
        pending = await store.get_command(tenant, sent.command_id)
        assert pending is not None
        assert (pending.status, pending.result_json) == (CommandStatus.PENDING, "")
        await store.claim_commands("owner-a")
        await store.finish_command(tenant, sent.command_id, '{"run_id":"r1"}')
        done = await store.get_command(tenant, sent.command_id)
        assert done is not None
        assert (done.status, done.result_json) == (CommandStatus.DONE, '{"run_id":"r1"}')
        await store.delete_command(tenant, sent.command_id)
        assert await store.get_command(tenant, sent.command_id) is None

    async def test_a_pending_command_is_withdrawn_and_goes_with_its_session(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.lease_holder(tenant, sid) == ""
        first, second = command(tenant, sid), command(tenant, sid)
        await store.put_command(first)
        await store.put_command(second)
        assert await store.withdraw_command(tenant, first.command_id) is True
        assert await store.get_command(tenant, first.command_id) is None
        assert await store.withdraw_command(tenant, first.command_id) is False
        assert await store.delete_session(tenant, sid) is True
        assert await store.get_command(tenant, second.command_id) is None

    async def test_commits_wake_their_topics_subscribers(self, store: SessionStore) -> None:
        # Wake-ups are hints (store/wakeups.py): a store wakes at least its own process's subscribers at commit.
        # The timeout only bounds a failure; a woken wait returns True at once.
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        sent = command(tenant, sid)
        events = store.subscribe(events_topic(tenant, sid))
        commands = store.subscribe(commands_topic())
        answer = store.subscribe(answer_topic(tenant, sent.command_id))
        try:
            await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1)]))
            assert await events.wait(30)
            await store.put_command(sent)
            assert await commands.wait(30)
            await store.finish_command(tenant, sent.command_id, "{}")
            assert await answer.wait(30)
        finally:
            for subscription in (events, commands, answer):
                subscription.close()

    async def test_purge_drops_uncollected_answers_and_orphans_and_keeps_pending_commands(
        self, store: SessionStore
    ) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60)
        done, claimed, pending, orphan = (
            command(tenant, sid),
            command(tenant, sid),
            command(tenant, sid),
            command(tenant, new_id()),
        )
        for sent in (done, claimed):
            await store.put_command(sent)
        await store.claim_commands("owner-a")
        await store.finish_command(tenant, done.command_id, "{}")
        for sent in (pending, orphan):
            await store.put_command(sent)

        async def kept() -> set[str]:
            ids = [c.command_id for c in (done, claimed, pending, orphan)]
            return {i for i in ids if await store.get_command(tenant, i) is not None}

        now = datetime.now(UTC)
        assert await store.purge_commands(older_than=now - timedelta(hours=1)) >= 1
        assert await kept() == {done.command_id, claimed.command_id, pending.command_id}
        assert await store.purge_commands(older_than=now + timedelta(hours=1)) >= 2
        assert await kept() == {pending.command_id}
