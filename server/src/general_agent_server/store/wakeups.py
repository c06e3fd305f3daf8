"""Wake-ups from the store: code that waits for what another replica commits (sessions/remote_tail.py follows
another replica's events, sessions/relay.py waits for relayed commands and their answers) subscribes to a topic
and is woken as soon as the store learns of a commit on it, instead of waiting out its poll interval.

A wake-up is a hint, never data: the woken code reads the store as it would after a poll, and polling stays the
fallback, so a missed wake-up costs at most one poll interval. A subscription remembers a wake-up that arrived
while nobody waited on it, so a commit between a read and the next `wait` is never lost.

`WakeupHub` is the implementation within one process (the in-memory and SQLite stores wake their own process's
waiters with it); the PostgreSQL store feeds the same hub from `LISTEN` (store/postgres/listener.py), so one
replica's commit wakes every replica's waiters."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "WAKE_ALL",
    "Flag",
    "Subscription",
    "WakeupHub",
    "WakeupSubscription",
    "Wakeups",
    "answer_topic",
    "commands_topic",
    "events_topic",
]

# A wake-up for every topic: sent when a specific one could not be (a payload too large, a reconnected listener
# that may have missed some).
WAKE_ALL = "*"


def events_topic(tenant: str, session_id: str) -> str:
    """New events of a session are committed."""
    return f"e\t{tenant}\t{session_id}"


def commands_topic() -> str:
    """A relayed command was written for some session (its lease holder claims it)."""
    return "c"


def answer_topic(tenant: str, command_id: str) -> str:
    """A relayed command was answered (its sender reads the answer)."""
    return f"a\t{tenant}\t{command_id}"


class WakeupSubscription(Protocol):
    async def wait(self, seconds: float) -> bool:
        """Returns True at the next wake-up of the topic (at once if one arrived since the last wait), False
        after `seconds` without one."""
        ...

    def clear(self) -> None:
        """Forgets a wake-up that arrived since the last wait (the waiter knows it was its own commits)."""
        ...

    @property
    def woken(self) -> bool:
        """Whether a wake-up arrived since the last wait or clear."""
        ...

    def close(self) -> None: ...


class Wakeups(Protocol):
    """The store's wake-up seam (see the module docstring)."""

    def subscribe(self, topic: str, on_wake: Callable[[], None] | None = None) -> WakeupSubscription:
        """With `on_wake`, each wake-up of the topic also calls it (one waiter following many topics)."""
        ...


class Flag:
    """A wake-up one coroutine waits for with a timeout, remembered when it arrives while nobody waits.

    `wait` is a future and a timer handle rather than `asyncio.wait_for` over an Event, which costs a task per
    call: the tails, the relay and the group-commit loop wait on one several times per turn."""

    __slots__ = ("_waiter", "_woken")

    def __init__(self) -> None:
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def woken(self) -> bool:
        return self._woken

    def wake(self) -> None:
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, seconds: float) -> bool:
        if not self._woken:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(seconds, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        woken = self._woken
        self._woken = False
        return woken

    def clear(self) -> None:
        self._woken = False


class Subscription(Flag):
    """One waiter's subscription to a topic of a WakeupHub (one coroutine waits on it at a time)."""

    __slots__ = ("_hub", "_on_wake", "topic")

    def __init__(self, hub: WakeupHub, topic: str, on_wake: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._hub = hub
        self.topic = topic
        self._on_wake = on_wake

    def wake(self) -> None:
        super().wake()
        if self._on_wake is not None:
            self._on_wake()

    def close(self) -> None:
        self._hub.unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class WakeupHub:
    """Subscriptions by topic within one process; `wake` sets every subscription of a topic."""

    def __init__(self) -> None:
        self._topics: dict[str, set[Subscription]] = {}

    def subscribe(self, topic: str, on_wake: Callable[[], None] | None = None) -> Subscription:
        subscription = Subscription(self, topic, on_wake)
        self._topics.setdefault(topic, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        subscribers = self._topics.get(subscription.topic)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._topics[subscription.topic]

    def wake(self, topic: str) -> None:
        if topic == WAKE_ALL:
            self.wake_all()
            return
        for subscription in self._topics.get(topic, ()):
            subscription.wake()

    def wake_all(self) -> None:
        for subscribers in self._topics.values():
            for subscription in subscribers:
                subscription.wake()
