"""Platform deletes and edits applied to what the bot keeps (`bot.memory.deletion`), through the
real core on both store backends (SQLite, and MongoDB on mongoeco), with episodic memory."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from bot.app import BotApp
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.audit import audit
from bot.memory.deletion import _edited_content
from bot.memory.render import RECALLED, RECALLED_IDS
from bot.messages import IncomingMessage, MessageRef
from bot.stores.memory_index import MemoryEntry
from bot.stores.protocols import StoreUnavailable
from bot.stores.records import (
    PendingConsolidation,
    PendingFact,
    PinnedFact,
    SessionState,
    StoredMessage,
)
from testkit.fakes.openai_server import FakeOpenAI
from tests.helpers import CollectingSink, until

Sink = CollectingSink

TEAM = TeamKey("slack", "T1")
ALICE, BOB, CAROL = (PersonKey("slack", "T1", u) for u in ("UA", "UB", "UC"))
THREAD = SessionKey("slack", "T1", "C1", "100.1")


def msg(text: str, mid: str, *, user: str, thread: str = "100.1", channel: str = "C1") -> Any:
    return IncomingMessage(
        platform="slack",
        team="T1",
        channel=channel,
        thread=thread,
        user=user,
        text=text,
        message_id=mid,
    )


async def say(app: BotApp, text: str, mid: str, **where: Any) -> CollectingSink:
    sink = CollectingSink()
    await app.handle_message(msg(text, mid, **where), sink)
    return sink


async def stored(app: BotApp, session: SessionKey = THREAD) -> list[StoredMessage]:
    return await app.store.between(session, after_seq=0, upto_seq=10_000)


async def team_text(app: BotApp) -> str:
    return "\n".join(m.model_dump_json() for m in await app.store.team_messages(TEAM))


def seq_of(messages: list[StoredMessage], mid: str) -> int:
    return next(m.seq for m in messages if m.meta.get("message_id") == mid)


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.mongo)])
async def app(request: pytest.FixtureRequest, make_app: Any) -> BotApp:
    if request.param == "sqlite":
        made: BotApp = await make_app(episodic=True)
        return made
    uri = request.getfixturevalue("mongo_uri")
    made = await make_app(episodic=True, mongodb_uri=uri, mongodb_db=f"t{uuid.uuid4().hex[:10]}")
    return made


async def settle(app: BotApp) -> None:
    assert app.episodic is not None and await app.episodic.idle(20)


async def test_a_delete_erases_the_message_its_turn_and_what_was_drawn_from_it(
    app: BotApp, fake_openai: FakeOpenAI
) -> None:
    await say(app, "Bob likes tomato soup", "m1", user="UB")
    await say(app, "the vault code is zebra-4411", "m2", user="UA")
    await say(app, "please remember that I am allergic to kiwi-77", "m3", user="UA")
    await say(app, "what should we cook for lunch", "m4", user="UB")
    # Carol, in another thread of the channel, has Alice's words recalled for her.
    await settle(app)
    await say(app, "what is the vault code again", "m5", user="UC", thread="200.1")
    await settle(app)
    carol = SessionKey("slack", "T1", "C1", "200.1")
    (asked,) = [m for m in await stored(app, carol) if m.role == "user"]
    assert "zebra-4411" in str(asked.meta.get(RECALLED))  # recalled: there is a copy to cut
    # Bob's soup shares nothing with her question: the second hop (seeded by Bob's excerpt,
    # whose context quotes the code) does not bring it in (tests/memory/test_hop_noise.py).
    assert "tomato" not in str(asked.meta.get(RECALLED))
    recalled_before = list(asked.meta.get(RECALLED_IDS) or [])

    before = await stored(app, THREAD)
    alice_seq, fact_seq, bob_seq = (seq_of(before, m) for m in ("m2", "m3", "m4"))
    alice_ref, bob_ref = f"{THREAD.id}#{alice_seq}", f"{THREAD.id}#{bob_seq}"
    assert app.memory_index is not None
    index = app.memory_index
    (bob_excerpt,) = await index.entries_from_sources(TEAM, [bob_ref])
    assert "zebra-4411" in bob_excerpt.context  # its context quoted Alice
    (fact,) = await app.store.list_facts(ALICE)
    assert "kiwi-77" in fact.text and fact.source_messages == [f"{THREAD.id}#{fact_seq}"]
    assert await app.store.team_tool_calls(TEAM)  # the remember call was logged
    # A summary and key facts folded over Alice's words, pending consolidation, memories.
    state = await app.store.get_state(THREAD) or SessionState(session=THREAD.id)
    state.summary, state.summary_upto_seq = "Alice gave the vault code zebra-4411.", alice_seq
    state.summary_speakers = [ALICE.id, BOB.id]
    state.pinned = [
        PinnedFact(text="Bob likes tomato soup", speaker=BOB.id, seq=alice_seq - 1),
        PinnedFact(text="Vault code zebra-4411", speaker=ALICE.id, seq=alice_seq),
    ]
    state.consolidation = PendingConsolidation(
        upto_seq=alice_seq, facts=[PendingFact(person=ALICE.id, text="x", message=alice_ref)]
    )
    assert await app.store.put_state(THREAD, state)
    memory = MemoryEntry(
        id="mem:alice",
        kind="memory",
        team=TEAM.id,
        place="slack:T1:C1",
        session=THREAD.id,
        people=[ALICE.id],
        source_ids=[alice_ref],
        text="Alice shared the vault code zebra-4411",
    )
    kept = memory.model_copy(
        update={"id": "mem:bob", "people": [BOB.id], "source_ids": [bob_ref], "text": "soup"}
    )
    await index.add([memory, kept])

    ref = MessageRef("slack", "T1", ("m2", "m3"), channel="C1", thread="100.1")
    result = await app.message_deleted(ref)

    assert result.found == 2 and not result.failed
    assert result.messages == 6  # two messages, a reply, a tool call, its result, a reply
    assert result.tool_calls == 1 and result.facts == 1 and result.summaries == 1
    left = await stored(app, THREAD)
    assert [m.meta.get("message_id") for m in left if m.role == "user"] == ["m1", "m4"]
    assert len(left) == 4  # Bob's two turns, whole
    assert await app.store.team_tool_calls(TEAM) == []
    assert "zebra-4411" not in await team_text(app) and "kiwi-77" not in await team_text(app)
    # Facts drawn only from the deleted message are closed, not live.
    assert await app.store.list_facts(ALICE) == []
    (closed,) = await app.store.list_facts(ALICE, history=True)
    assert closed.closed_reason == "deleted"
    # The index: nothing drawn from Alice; Bob's excerpt made again without her as context.
    assert await index.entries_from_sources(TEAM, [alice_ref]) == []
    (again,) = [e for e in await index.entries_from_sources(TEAM, [bob_ref]) if e.kind != "memory"]
    assert again.id == bob_excerpt.id and "zebra" not in again.context
    assert again.context.startswith("UB: Bob likes tomato soup")
    assert [e.id for e in await index.get(TEAM, ["mem:alice", "mem:bob"])] == ["mem:bob"]
    # The summary covering it is gone (rebuilt from what remains), and what it drew on.
    scrubbed = await app.store.get_state(THREAD)
    assert scrubbed is not None
    assert scrubbed.summary == "" and scrubbed.summary_upto_seq == 0
    assert [p.text for p in scrubbed.pinned] == ["Bob likes tomato soup"]
    assert scrubbed.erasures == state.erasures + 1 and scrubbed.consolidation is None
    # Carol's message keeps no recalled copy of Alice's words.
    (asked,) = [m for m in await stored(app, carol) if m.role == "user"]
    assert "zebra" not in str(asked.meta.get(RECALLED))
    # The other memories stay (the second retrieval hop may have recalled more than Bob's).
    kept_ids = [i for i in recalled_before if not i.endswith(f"#{alice_seq}")]
    assert bob_excerpt.id in kept_ids and len(kept_ids) == len(recalled_before) - 1
    assert asked.meta.get(RECALLED_IDS) == kept_ids
    # Nowhere in the stores' files, documents or the cache.
    assert await audit(phrase="zebra-4411", store=app.store, cache=app.cache) == []

    # A re-delivered delete changes nothing.
    assert (await app.message_deleted(ref)).found == 0
    assert len(await stored(app, THREAD)) == 4

    # The next request in the thread holds neither her words nor the bot's answer to them.
    fake = fake_openai
    fake.requests.clear()
    await say(app, "anything else", "m6", user="UB")
    assert fake.requests and "zebra" not in str(fake.requests[-1]["messages"])


async def test_an_edit_rewrites_the_words_and_what_was_drawn_from_them(
    app: BotApp, fake_openai: FakeOpenAI
) -> None:
    await say(app, "the meeting is at 3pm-aa", "m1", user="UA")
    await say(app, "thanks, see you there", "m2", user="UB")
    await settle(app)
    before = await stored(app)
    alice_seq, bob_seq = seq_of(before, "m1"), seq_of(before, "m2")
    (original,) = [m for m in before if m.seq == alice_seq]
    state = await app.store.get_state(THREAD) or SessionState(session=THREAD.id)
    state.summary, state.summary_upto_seq = "The meeting is at 3pm-aa.", bob_seq
    assert await app.store.put_state(THREAD, state)

    ref = MessageRef("slack", "T1", ("m1",), channel="C1")
    result = await app.message_edited(ref, "the meeting is at 4pm-bb")

    assert result.found == 1 and result.rewritten == 1 and result.messages == 0
    after = await stored(app)
    (edited,) = [m for m in after if m.seq == alice_seq]
    assert edited.content == "the meeting is at 4pm-bb" and edited.meta == original.meta
    assert edited.tokens > 0 and len(after) == len(before)
    reply = next(m for m in after if m.role == "assistant" and m.turn_id == edited.turn_id)
    assert reply.content == "ok: the meeting is at 3pm-aa"  # the answer stays as it was
    assert app.memory_index is not None
    index = app.memory_index
    (own,) = await index.entries_from_sources(TEAM, [f"{THREAD.id}#{alice_seq}"])
    (bob,) = await index.entries_from_sources(TEAM, [f"{THREAD.id}#{bob_seq}"])
    assert "4pm-bb" in own.text and "3pm-aa" not in own.text.split("Bot:")[0]
    assert "4pm-bb" in bob.context and "3pm-aa" not in bob.context
    scrubbed = await app.store.get_state(THREAD)
    assert scrubbed is not None and scrubbed.summary == "" and scrubbed.summary_upto_seq == 0

    # The same text again, or an edit of a message never stored: nothing changes.
    same = await app.message_edited(ref, "the meeting is at 4pm-bb")
    assert same.found == 1 and same.rewritten == 0 and same.rebuilt == 0
    assert [e.id for e in await index.entries_from_sources(TEAM, [own.source_ids[0]])] == [own.id]
    nothing = await app.message_edited(MessageRef("slack", "T1", ("nope",), channel="C1"), "x")
    assert nothing.found == 0

    fake = fake_openai
    fake.requests.clear()
    await say(app, "what time again", "m3", user="UB")
    said = [m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "user"]
    assert "UA: the meeting is at 4pm-bb" in said and not any("3pm-aa" in s for s in said)


async def test_a_delete_waits_for_the_turn_in_flight(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    app: BotApp = await make_app()
    fake_openai.latency = 0.5
    turn = asyncio.create_task(say(app, "a secret in flight-9q", "m1", user="UA"))
    # The model was asked: the message is stored, the turn is in flight.
    await until(lambda: bool(fake_openai.requests), what="the model request")
    result = await app.message_deleted(MessageRef("slack", "T1", ("m1",), channel="C1"))
    await turn
    assert result.found == 1 and result.messages == 2  # the message and the reply after it
    assert await stored(app) == []


async def test_bad_input_is_a_no_op_and_a_store_outage_says_failed(make_app: Any) -> None:
    app: BotApp = await make_app()
    await say(app, "hello", "m1", user="UA")
    for ref in (
        MessageRef("slack", "", ("m1",)),
        MessageRef("slack", "T1", ("m1",), channel="C:1"),
        MessageRef("slack", "T1", ()),
        MessageRef("slack", "T1", ("", " ", "x" * 500)),
        MessageRef("slack", "T1", 42),  # type: ignore[arg-type]
        "not a ref",  # type: ignore[arg-type]
    ):
        assert await app.message_deleted(ref) == type(await app.message_deleted(ref))()
    not_text: Any = None
    assert (await app.message_edited(MessageRef("slack", "T1", ("m1",)), not_text)).found == 0
    many = (*(f"x{i}" for i in range(500)), "m1")  # capped at 100 ids: m1 is not reached
    assert (await app.message_deleted(MessageRef("slack", "T1", many))).found == 0
    assert len(await stored(app)) == 2

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("down")

    app.store.find_platform_message = down  # type: ignore[method-assign]
    assert (await app.message_deleted(MessageRef("slack", "T1", ("m1",)))).failed


def test_an_edit_keeps_the_notes_of_the_files_shared_with_the_message() -> None:
    files = "[file: log.txt (text/plain, 3 B) — shown in full]\nabc\n[end of log.txt]"
    m = StoredMessage(
        role="user",
        content=f"old words\n\n{files}",
        speaker=ALICE.id,
        turn_id="t",
        session=THREAD.id,
        seq=1,
        meta={"files": [{"name": "log.txt"}]},
    )
    assert _edited_content(m, "new words") == f"new words\n\n{files}"
    assert _edited_content(m, "  ") == files
    plain = m.model_copy(update={"meta": {}, "content": "old"})
    assert _edited_content(plain, "new") == "new"


async def test_recalled_copies_are_cut_in_a_private_place(make_app: Any) -> None:
    """A private channel's memories are recalled only there: the cut reads that place alone."""
    app: BotApp = await make_app(episodic=True)

    def private(text: str, mid: str, user: str, thread: str) -> IncomingMessage:
        return IncomingMessage(
            platform="slack",
            team="T1",
            channel="G1",
            thread=thread,
            user=user,
            text=text,
            message_id=mid,
            is_private=True,
        )

    await app.handle_message(private("the vault code is zebra-9090", "g1", "UA", "1.1"), Sink())
    await settle(app)
    await app.handle_message(private("what is the vault code", "g2", "UC", "2.1"), Sink())
    await say(app, "an unrelated public message", "c1", user="UB", channel="C9")
    await settle(app)
    asking = SessionKey("slack", "T1", "G1", "2.1")
    (asked,) = [m for m in await stored(app, asking) if m.role == "user"]
    assert "zebra-9090" in str(asked.meta.get(RECALLED))

    result = await app.message_deleted(MessageRef("slack", "T1", ("g1",), channel="G1"))
    assert result.found == 1
    (asked,) = [m for m in await stored(app, asking) if m.role == "user"]
    assert RECALLED not in asked.meta and RECALLED_IDS not in asked.meta
    assert await audit(phrase="zebra-9090", store=app.store, cache=app.cache) == []
