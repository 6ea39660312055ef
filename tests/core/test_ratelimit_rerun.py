"""A turn taken over from a dead replica is the same turn: admitted once, not charged to the
person's rate limit again (issue 26, found on the way).

Real parts: the SQLite inbox shared by two "replicas" (one of them holds its entries under the
name of a process on this host that is gone, as a killed replica leaves them), the in-process
cache, the limiter and the inbox's own deliveries.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.inbox import Delivery
from bot.messages import IncomingMessage
from bot.ratelimit import USER_RATE_REPLY, Rate, TurnLimiter
from bot.stores.inbox import InboxItem
from bot.stores.inbox_sqlite import SqliteInbox
from bot.stores.memory_cache import MemoryCache
from bot.stores.sqlite import SqliteStore

KIND = "slack.event"
LIMIT = 3


def _dead_holder() -> str:
    """A holder name of a process on this host that does not exist."""
    return f"{socket.gethostname()}:{2**22 + 7}:dead"


@pytest.fixture
async def inbox(tmp_path: Path) -> AsyncIterator[SqliteInbox]:
    store = await SqliteStore.open(tmp_path / "bot.db")
    box = await SqliteInbox.open(store.worker, claim_after=30)
    yield box
    await store.close()


def _message(delivery: Delivery | None) -> IncomingMessage:
    return IncomingMessage(
        platform="slack",
        team="T1",
        channel=f"C{delivery.body['n'] if delivery else 'x'}",
        thread=None,
        user="U1",
        text="hello",
        admission=delivery.admission if delivery else None,
    )


async def test_a_turn_taken_over_from_a_dead_replica_is_not_counted_again(
    inbox: SqliteInbox,
) -> None:
    limiter = TurnLimiter(
        MemoryCache(), per_user=Rate(LIMIT, 60), per_team=Rate(0, 1), team_queue=0
    )
    for n in range(LIMIT):
        await inbox.put(InboxItem(KIND, f"s{n}", {"n": n}))
    # The first replica takes every entry and admits each turn, then dies mid-turn.
    first = await inbox.take(KIND, _dead_holder(), count=10, wait=0)
    assert len(first) == LIMIT
    for entry in first:
        delivery = Delivery(entry, True, inbox.note)
        assert await limiter.refusal(_message(delivery)) is None
    # Another replica takes them over (the holder is gone) and runs the same turns again.
    again = await inbox.take(KIND, "survivor", count=10, wait=0)
    assert sorted(e.id for e in again) == sorted(e.id for e in first)
    assert all(e.tries == 2 for e in again)
    refusals = [await limiter.refusal(_message(Delivery(e, True, inbox.note))) for e in again]
    assert refusals == [None] * LIMIT
    # The person's window is still full: a new message is refused as before.
    assert await limiter.refusal(_message(None)) == USER_RATE_REPLY


async def test_an_entry_refused_at_its_first_attempt_is_not_admitted_by_a_rerun(
    inbox: SqliteInbox,
) -> None:
    limiter = TurnLimiter(MemoryCache(), per_user=Rate(1, 60), per_team=Rate(0, 1), team_queue=0)
    for n in range(2):
        await inbox.put(InboxItem(KIND, f"s{n}", {"n": n}))
    first = await inbox.take(KIND, _dead_holder(), count=10, wait=0)
    verdicts = [await limiter.refusal(_message(Delivery(e, True, inbox.note))) for e in first]
    assert verdicts == [None, USER_RATE_REPLY]
    again = {e.id: e for e in await inbox.take(KIND, "survivor", count=10, wait=0)}
    refused = again[first[1].id]
    assert await limiter.refusal(_message(Delivery(refused, True, inbox.note))) is not None
