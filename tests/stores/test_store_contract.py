"""The durable-store contract, run against every backend (SQLite, mongoeco, real MongoDB)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from bot.keys import PersonKey, SessionKey, TeamKey
from bot.stores.protocols import Store
from bot.stores.records import NewMessage, Role, SessionState, ToolCallLog, utcnow
from tests.stores.backends import Backend

CHANNEL = SessionKey("slack", "T1", "C1")
THREAD = SessionKey("slack", "T1", "C1", "1700.01")
OTHER_TEAM = SessionKey("slack", "T2", "C1")
ALICE = PersonKey("slack", "T1", "U1")
BOB = PersonKey("slack", "T1", "U2")
ALICE_ELSEWHERE = PersonKey("slack", "T2", "U1")  # same user id, another workspace


def msg(
    content: str, speaker: PersonKey = ALICE, *, role: Role = "user", turn: str = "t1"
) -> NewMessage:
    return NewMessage(role=role, content=content, speaker=speaker.id, turn_id=turn)


def call_log(session: SessionKey, speaker: PersonKey, call_id: str, **extra: object) -> ToolCallLog:
    fields: dict[str, object] = {
        "call_id": call_id,
        "session": session.id,
        "speaker": speaker.id,
        "tool": "get_order_status",
        "arguments": '{"order_id": "#W1"}',
        "outcome": "ok",
        "duration_ms": 12.5,
        "result_size": 120,
    }
    fields.update(extra)
    return ToolCallLog.model_validate(fields)


# --- conversation ----------------------------------------------------------------------------


async def test_append_assigns_consecutive_seqs_and_reads_in_order(store: Store) -> None:
    first = await store.append(CHANNEL, [msg("a"), msg("b", role="assistant"), msg("c")])
    second = await store.append(CHANNEL, [msg("d", turn="t2"), msg("e", turn="t2")])

    assert [m.seq for m in first + second] == [1, 2, 3, 4, 5]
    assert all(m.session == CHANNEL.id for m in first + second)
    assert await store.count(CHANNEL) == 5
    assert [m.content for m in await store.recent(CHANNEL, limit=2)] == ["d", "e"]
    assert [m.content for m in await store.recent(CHANNEL, limit=50)] == list("abcde")
    assert await store.recent(CHANNEL, limit=0) == []
    assert [m.seq for m in await store.between(CHANNEL, after_seq=1, upto_seq=3)] == [2, 3]
    assert await store.between(CHANNEL, after_seq=5, upto_seq=9) == []
    assert await store.append(CHANNEL, []) == []


async def test_message_fields_round_trip(store: Store) -> None:
    sent = NewMessage(
        role="assistant",
        content="",
        speaker=ALICE.id,
        turn_id="t9",
        tool_calls=[{"id": "call_1", "type": "function", "function": {"name": "x"}}],
        tokens=17,
        meta={"platform_ts": "1700.02", "nested": {"k": [1, 2]}},
    )
    tool = NewMessage(
        role="tool",
        content='{"ok": true}',
        speaker=ALICE.id,
        turn_id="t9",
        name="get_order_status",
        tool_call_id="call_1",
        from_tool=True,
    )
    stored = await store.append(THREAD, [sent, tool])
    read = await store.recent(THREAD, limit=2)
    assert read == stored
    assert read[0].tool_calls == sent.tool_calls and read[0].meta == sent.meta
    assert read[1].from_tool and read[1].tool_call_id == "call_1"
    assert read[0].created_at.tzinfo is not None


async def test_concurrent_appends_never_share_a_seq(store: Store) -> None:
    async def turn(i: int) -> list[int]:
        done = await store.append(
            CHANNEL, [msg(f"q{i}", turn=f"t{i}"), msg(f"a{i}", role="assistant", turn=f"t{i}")]
        )
        return [m.seq for m in done]

    results = await asyncio.gather(*(turn(i) for i in range(20)))

    assert sorted(s for pair in results for s in pair) == list(range(1, 41))
    assert all(pair[1] == pair[0] + 1 for pair in results)  # one append's seqs are consecutive
    everything = await store.recent(CHANNEL, limit=40)
    assert [m.seq for m in everything] == list(range(1, 41))
    by_turn = {m.seq: m.turn_id for m in everything}
    for i, (q, a) in enumerate(results):
        assert by_turn[q] == by_turn[a] == f"t{i}"


async def test_sessions_are_isolated(store: Store) -> None:
    await store.append(CHANNEL, [msg("channel")])
    await store.append(THREAD, [msg("thread 1"), msg("thread 2")])
    await store.append(OTHER_TEAM, [msg("other team", ALICE_ELSEWHERE)])

    assert [m.content for m in await store.recent(THREAD, limit=10)] == ["thread 1", "thread 2"]
    assert [m.content for m in await store.recent(CHANNEL, limit=10)] == ["channel"]
    assert [m.content for m in await store.between(OTHER_TEAM, after_seq=0, upto_seq=9)] == [
        "other team"
    ]
    assert (await store.count(CHANNEL), await store.count(THREAD)) == (1, 2)
    assert await store.count(SessionKey("discord", "T1", "C1")) == 0


def test_keys_with_empty_parts_are_refused() -> None:
    with pytest.raises(ValueError):
        SessionKey("slack", "", "C1")
    with pytest.raises(ValueError):
        SessionKey("slack", "T1", "C1", " ")
    with pytest.raises(ValueError):
        PersonKey("slack", "T1", "")
    with pytest.raises(ValueError):
        TeamKey("", "T1")


async def test_delete_speaker_erases_only_that_person_in_every_session(store: Store) -> None:
    await store.append(CHANNEL, [msg("alice asks"), msg("reply to alice", role="assistant")])
    await store.append(CHANNEL, [msg("bob asks", BOB, turn="t2")])
    await store.append(THREAD, [msg("alice in thread", turn="t3")])
    await store.append(OTHER_TEAM, [msg("alice elsewhere", ALICE_ELSEWHERE)])

    assert await store.sessions_of_speaker(ALICE) == sorted([CHANNEL.id, THREAD.id])
    assert await store.delete_speaker(ALICE) == 3

    assert [m.content for m in await store.recent(CHANNEL, limit=10)] == ["bob asks"]
    assert await store.recent(THREAD, limit=10) == []
    assert [m.content for m in await store.recent(OTHER_TEAM, limit=10)] == ["alice elsewhere"]
    assert await store.sessions_of_speaker(ALICE) == []
    assert await store.sessions_of_speaker(BOB) == [CHANNEL.id]
    assert await store.delete_speaker(ALICE) == 0
    # Seqs are never reused after an erasure, so a summary's upto_seq keeps its meaning.
    (again,) = await store.append(THREAD, [msg("after")])
    assert again.seq == 2


# --- session state ---------------------------------------------------------------------------


async def test_put_state_is_optimistic(store: Store) -> None:
    assert await store.get_state(CHANNEL) is None
    state = SessionState(session=CHANNEL.id, summary="first")
    assert await store.put_state(CHANNEL, state)
    assert state.version == 1

    stale = SessionState(session=CHANNEL.id, summary="stale writer")  # version 0
    assert not await store.put_state(CHANNEL, stale)
    assert stale.version == 0

    state.summary, state.summary_upto_seq = "second", 4
    assert await store.put_state(CHANNEL, state)
    read = await store.get_state(CHANNEL)
    assert read is not None and (read.summary, read.version, read.summary_upto_seq) == (
        "second",
        2,
        4,
    )

    a, b = read.model_copy(deep=True), read.model_copy(deep=True)
    a.summary, b.summary = "racer a", "racer b"
    results = await asyncio.gather(store.put_state(CHANNEL, a), store.put_state(CHANNEL, b))
    assert sorted(results) == [False, True]
    final = await store.get_state(CHANNEL)
    assert final is not None and final.version == 3
    assert final.summary == ("racer a" if results[0] else "racer b")
    assert await store.get_state(THREAD) is None


async def test_state_mismatched_key_and_summary_failures(store: Store) -> None:
    with pytest.raises(ValueError):
        await store.put_state(THREAD, SessionState(session=CHANNEL.id))
    failed_at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    state = SessionState(session=CHANNEL.id, summary_failures=3, summary_failed_at=failed_at)
    assert await store.put_state(CHANNEL, state)
    read = await store.get_state(CHANNEL)
    assert read is not None and (read.summary_failures, read.summary_failed_at) == (3, failed_at)


# --- facts -----------------------------------------------------------------------------------


async def test_facts_are_per_person_deduplicated_and_ordered(store: Store) -> None:
    peanuts = await store.add_fact(ALICE, "Allergic to peanuts", session=CHANNEL, source_ref="3")
    tea = await store.add_fact(ALICE, "Prefers tea", source="tool")
    again = await store.add_fact(ALICE, "  allergic to   PEANUTS. ")
    bobs = await store.add_fact(BOB, "Allergic to peanuts")

    assert again == peanuts
    assert len(peanuts.id) == 6 and peanuts.id.isalnum() and peanuts.id == peanuts.id.lower()
    assert (peanuts.session, peanuts.source_ref, peanuts.source) == (CHANNEL.id, "3", "user")
    assert tea.source == "tool"
    assert [f.text for f in await store.list_facts(ALICE)] == ["Allergic to peanuts", "Prefers tea"]
    assert await store.list_facts(BOB) == [bobs]
    assert await store.list_facts(ALICE_ELSEWHERE) == []
    with pytest.raises(ValueError):
        await store.add_fact(ALICE, "   ")


async def test_fact_deletion(store: Store) -> None:
    first = await store.add_fact(ALICE, "Likes jazz")
    await store.add_fact(ALICE, "Lives in Lyon")
    bobs = await store.add_fact(BOB, "Likes jazz")

    assert not await store.delete_fact(BOB, first.id) or first.id == bobs.id
    assert await store.delete_fact(ALICE, f" {first.id.upper()} ")  # as a user might type it
    assert not await store.delete_fact(ALICE, first.id)
    assert [f.text for f in await store.list_facts(ALICE)] == ["Lives in Lyon"]
    assert await store.delete_all_facts(ALICE) == 1
    assert await store.list_facts(ALICE) == []
    assert await store.list_facts(BOB) == [bobs]
    refreshed = await store.add_fact(ALICE, "Likes jazz")  # the text can be stored again
    assert [f.id for f in await store.list_facts(ALICE)] == [refreshed.id]


async def test_concurrent_identical_facts_are_stored_once(store: Store) -> None:
    made = await asyncio.gather(*(store.add_fact(ALICE, "Vegetarian") for _ in range(8)))
    assert len({f.id for f in made}) == 1
    assert len(await store.list_facts(ALICE)) == 1


# --- tool installs ---------------------------------------------------------------------------


async def test_tool_installs_are_per_team(store: Store) -> None:
    t1, t2 = TeamKey("slack", "T1"), TeamKey("slack", "T2")
    await store.install(t1, "weather", {}, by="U1")
    first = await store.install(t1, "orders", {"url": "http://a", "token": "s3"}, by="U1")
    await store.install(t2, "orders", {"url": "http://b"}, by="U9")

    assert (first.team, first.installed_by) == (t1.id, "U1")
    assert [(i.pack, i.config) for i in await store.installed(t1)] == [
        ("orders", {"url": "http://a", "token": "s3"}),
        ("weather", {}),
    ]
    await store.install(t1, "orders", {"url": "http://c"}, by="U2")
    orders = [i for i in await store.installed(t1) if i.pack == "orders"]
    assert [(i.config, i.installed_by) for i in orders] == [({"url": "http://c"}, "U2")]

    assert await store.remove(t1, "orders")
    assert not await store.remove(t1, "orders")
    assert [i.pack for i in await store.installed(t1)] == ["weather"]
    assert [i.config for i in await store.installed(t2)] == [{"url": "http://b"}]
    assert await store.installed(TeamKey("discord", "T1")) == []


# --- tool call logs --------------------------------------------------------------------------


async def test_tool_call_logs(store: Store) -> None:
    now = utcnow()
    for i in range(3):
        created = now - timedelta(seconds=3 - i)
        await store.log_call(CHANNEL, call_log(CHANNEL, ALICE, f"c{i}", created_at=created))
    await store.log_call(CHANNEL, call_log(CHANNEL, BOB, "b0"))
    await store.log_call(THREAD, call_log(THREAD, ALICE, "th"))

    assert [c.call_id for c in await store.calls(CHANNEL)] == ["c0", "c1", "c2", "b0"]
    assert [c.call_id for c in await store.calls(CHANNEL, limit=2)] == ["c2", "b0"]
    assert [c.call_id for c in await store.calls(THREAD)] == ["th"]
    assert await store.delete_speaker_calls(ALICE) == 4
    assert [c.call_id for c in await store.calls(CHANNEL)] == ["b0"]
    assert await store.calls(THREAD) == []
    with pytest.raises(ValueError):
        await store.log_call(THREAD, call_log(CHANNEL, BOB, "wrong place"))


async def test_tool_call_logs_expire_after_seven_days(store: Store) -> None:
    old = call_log(CHANNEL, ALICE, "old", created_at=utcnow() - timedelta(days=8))
    await store.log_call(CHANNEL, old)
    await store.log_call(CHANNEL, call_log(CHANNEL, ALICE, "new"))
    assert [c.call_id for c in await store.calls(CHANNEL)] == ["new"]


# --- schema versions -------------------------------------------------------------------------


async def test_old_schema_versions_are_upgraded_on_read(backend: Backend) -> None:
    store = backend.store
    # Written before schema_version existed and before messages carried a turn id.
    await backend.raw_insert(
        "messages",
        {
            "session": CHANNEL.id,
            "seq": 1,
            "speaker": ALICE.id,
            "role": "user",
            "content": "from the old days",
            "created_at": utcnow(),
        },
    )
    old_call = call_log(CHANNEL, ALICE, "old-call").model_dump()
    del old_call["result_size"], old_call["schema_version"]
    await backend.raw_insert("tool_calls", old_call)

    (message,) = await store.recent(CHANNEL, limit=5)
    assert (message.content, message.turn_id, message.schema_version) == (
        "from the old days",
        "legacy-1",
        1,
    )
    (call,) = await store.calls(CHANNEL)
    assert (call.call_id, call.result_size, call.schema_version) == ("old-call", 0, 1)


async def test_ping_and_compact(store: Store) -> None:
    assert await store.ping()
    await store.append(CHANNEL, [msg("x")])
    await store.compact()
    assert await store.count(CHANNEL) == 1


async def test_session_heads_name_every_session_and_its_last_seq(store: Store) -> None:
    assert await store.session_heads() == {}
    await store.append(CHANNEL, [msg("a"), msg("b")])
    await store.append(THREAD, [msg("c", BOB)])
    await store.append(CHANNEL, [msg("d", BOB, turn="t2")])
    await store.delete_speaker(BOB)  # erasure never lowers a head: seqs are not reused
    assert await store.session_heads() == {CHANNEL.id: 3, THREAD.id: 1}


async def test_head_is_the_seq_counter_and_the_state_in_one_read(store: Store) -> None:
    assert await store.head(CHANNEL) == (0, None)
    await store.append(CHANNEL, [msg("a"), msg("b")])
    assert await store.head(CHANNEL) == (2, None)
    state = SessionState(session=CHANNEL.id, summary="so far", summary_upto_seq=1)
    assert await store.put_state(CHANNEL, state)
    last_seq, read = await store.head(CHANNEL)
    assert last_seq == 2
    assert read is not None and (read.summary, read.summary_upto_seq, read.version) == (
        "so far",
        1,
        1,
    )
    await store.append(CHANNEL, [msg("c", BOB, turn="t2")])
    await store.delete_speaker(BOB)  # the newest message erased: the counter stays
    assert (await store.head(CHANNEL))[0] == 3
    assert [m.seq for m in await store.recent(CHANNEL, limit=1)] == [2]
    assert await store.head(THREAD) == (0, None)  # nothing leaks across sessions
    assert await store.head(OTHER_TEAM) == (0, None)
