"""Red team for memory trust (issue 19): the audience rule and a forget that leaves no copy.

The model here is a parrot: it answers every chat request by repeating all it was given (the
memory note, the history, the recalled memories), as real models quote their context. So
whatever reaches a request also lands in the bot's stored reply, in summaries and in index
entries, and each leak the rule must stop is visible in the requests the fake model received.

Each case runs on the embedded setup (SQLite, in-process cache) and on MongoDB + Redis. The
oracles do not use the code under test: what the model was sent is read at the fake server,
and after `/memory forget all` the data directory's bytes, every MongoDB document and every
Redis value under the bot's prefix are scanned with plain byte search.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import bson
import pymongo
import pytest
import redis

from bot.app import BotApp
from bot.core import CommandRequest
from bot.keys import PersonKey
from bot.memory.audit import audit
from bot.memory.audit_cli import run_audit
from bot.memory.nightly import build_consolidator
from bot.messages import IncomingMessage, MessageRef
from testkit.fakes.openai_server import FakeOpenAI, Step, default_brain, message_text, text
from tests.helpers import CollectingSink

_ids = itertools.count(1)


def parrot(request: dict[str, Any]) -> Step:
    """Repeat everything the request holds but the constant system prompt (tool calls, tool
    results and structured-output tasks go as the default brain does)."""
    step = default_brain(request)
    messages = request.get("messages") or []
    if request.get("response_format") or getattr(step, "calls", ()):
        return step
    if messages and messages[-1].get("role") == "tool":
        return step
    said = [message_text(m) for m in messages[1:]]
    return text("I recall: " + " | ".join(s for s in said if s)[:6000])


@dataclasses.dataclass
class Place:
    channel: str
    thread: str | None = None
    dm: bool = False
    private: bool = False


C1 = Place("C1")  # a public channel
C1_THREAD = Place("C1", "1700.1")
C2 = Place("C2")  # another public channel
P1 = Place("G1", private=True)  # a private channel
P1_THREAD = Place("G1", "1800.1", private=True)
P2 = Place("G2", private=True)  # another private channel


def dm(user: str) -> Place:
    return Place(f"D-{user}", dm=True)


class Bot:
    def __init__(self, app: BotApp, fake: FakeOpenAI) -> None:
        self.app, self.fake = app, fake

    async def say(self, user: str, words: str, where: Place, message_id: str = "") -> str:
        """One message; returns everything the model was sent for it (chat requests)."""
        before = len(self.fake.requests)
        sink = CollectingSink()
        msg = IncomingMessage(
            platform="slack",
            team="T1",
            channel=where.channel,
            thread=where.thread,
            user=user,
            text=words,
            message_id=message_id or f"{next(_ids)}.000",
            is_dm=where.dm,
            is_private=where.private,
        )
        await self.app.handle_message(msg, sink)
        assert sink.final is not None and not sink.error, sink.final
        sent = [r for r in self.fake.requests[before:] if not r.get("response_format")]
        assert sent, "the model was asked nothing"
        return json.dumps(sent, ensure_ascii=False)

    async def settle(self) -> None:
        """Background work done: summaries folded, episodic indexing caught up."""
        await self.app.drain(30)
        assert self.app.episodic is not None
        assert await self.app.episodic.idle(30)

    async def command(self, user: str, text_: str, channel: str = "C1") -> str:
        reply = await self.app.handle_command(
            CommandRequest("slack", "T1", channel, user, "memory", text_)
        )
        assert reply.ok, reply.text
        return reply.text


MakeBot = Callable[[], Awaitable[Bot]]


@pytest.fixture(params=["sqlite", "mongo+redis"])
async def backend(request: pytest.FixtureRequest, make_app: Any, fake_openai: FakeOpenAI) -> Any:
    """A bot on the embedded store, or on MongoDB + Redis; plus what the oracles scan."""
    fake_openai.brain = parrot
    overrides: dict[str, Any] = {}
    where: dict[str, Any] = {"kind": request.param}
    if request.param == "mongo+redis":
        mongo_uri = request.getfixturevalue("mongo_uri")
        redis_url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        db = f"rt{uuid.uuid4().hex[:10]}"
        overrides = {
            "mongodb_uri": mongo_uri,
            "mongodb_db": db,
            "redis_url": redis_url,
            "bot_redis_prefix": prefix,
        }
        where.update(mongo_uri=mongo_uri, db=db, redis_url=redis_url, prefix=prefix)
    app = await make_app(episodic=True, **overrides)
    # Fold summaries early, so the summaries are part of what is checked.
    app.memory.policy = dataclasses.replace(app.memory.policy, max_messages=6)
    where["data_dir"] = Path(app.settings.bot_data_dir)
    return Bot(app, fake_openai), where


# --- the audience rule -----------------------------------------------------------------------


async def test_a_fact_said_in_a_dm_stays_in_the_persons_dms(backend: Any) -> None:
    bot, _ = backend
    await bot.say("UA", "please remember that my birthday is 14 March 1990", dm("UA"))
    assert "14 March 1990" in await bot.say("UA", "what do you know about me?", dm("UA"))
    for place in (C1, C1_THREAD, P1):
        assert "14 March 1990" not in await bot.say("UA", "what do you know about me?", place)


async def test_a_fact_said_in_a_private_channel_stays_there_and_in_the_persons_dm(
    backend: Any,
) -> None:
    bot, _ = backend
    await bot.say("UA", "please remember that my project codename is bluefinch-77", P1)
    assert "bluefinch-77" in await bot.say("UA", "what is my codename?", P1_THREAD)
    assert "bluefinch-77" in await bot.say("UA", "what is my codename?", dm("UA"))
    for place in (C1, P2):
        assert "bluefinch-77" not in await bot.say("UA", "what is my codename?", place)


async def test_a_public_fact_is_used_anywhere_in_the_team_for_that_person_only(
    backend: Any,
) -> None:
    bot, _ = backend
    await bot.say("UA", "please remember that I prefer tea-oolong-3", C1)
    for place in (C2, P1, dm("UA")):
        assert "tea-oolong-3" in await bot.say("UA", "what do I drink?", place)
    # Person to person: not in Bob's context, not even in the thread where she said it.
    assert "tea-oolong-3" not in await bot.say("UB", "what does she drink?", C1)
    assert "tea-oolong-3" not in await bot.say("UB", "what do I drink?", dm("UB"))


async def test_consolidated_private_and_dm_words_never_reach_a_public_channel(
    backend: Any,
) -> None:
    bot, _ = backend
    await bot.say("UA", "I am allergic to quokka-fur-19.", P1)
    await bot.say("UA", "I am training for the marathon-zx4 in secret.", dm("UA"))
    await bot.say("UB", "Anything new in the team?", P1)  # Bob was in the private channel too
    await bot.settle()
    report = await build_consolidator(bot.app).run()
    assert report.ran
    await bot.settle()
    facts = await bot.app.store.list_facts(PersonKey("slack", "T1", "UA"), history=True)
    assert any("quokka-fur-19" in f.text for f in facts)  # consolidation did make the facts
    for place in (C1, C2):
        sent = await bot.say("UA", "what do you know? quokka-fur-19 marathon-zx4", place)
        assert "allergic to quokka" not in sent and "training for the marathon" not in sent
    # The private channel's memory (it cites the bot's reply too) stays out of Bob's DM.
    sent = await bot.say("UB", "anything about quokka-fur-19 allergies?", dm("UB"))
    assert "allergic to quokka" not in sent
    # ... and is still used where it was said.
    assert "allergic to quokka" in await bot.say("UA", "am I allergic to quokka-fur-19?", P1)


# --- forget leaves no copy -------------------------------------------------------------------

ALICE_WORDS = "My locker combination is 4471 and my cat is called Mr Whiskerton"
ALICE_PHRASES = ("Whiskerton", "locker combination is 4471")
BOB_WORDS = "I keep the release notes on the zebra-wiki-88 page"


def _forms(phrase: str) -> list[bytes]:
    forms = {phrase, phrase.lower(), json.dumps(phrase)[1:-1], json.dumps(phrase.lower())[1:-1]}
    return [f.encode("utf-8").lower() for f in forms]


def scan_files(data_dir: Path, phrase: str) -> list[str]:
    """Every file under the data directory (databases, WALs), byte by byte."""
    wanted = _forms(phrase)
    return [
        str(p.relative_to(data_dir))
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and any(w in p.read_bytes().lower() for w in wanted)
    ]


def scan_mongo(uri: str, db: str, phrase: str) -> list[str]:
    wanted = _forms(phrase)
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(uri)
    try:
        found = []
        for name in client[db].list_collection_names():
            if name == "erasure_receipts":
                continue
            for doc in client[db][name].find({}):
                raw = bson.encode(doc).lower()
                if any(w in raw for w in wanted):
                    found.append(f"{name}:{doc.get('_id')}")
        return found
    finally:
        client.close()


def scan_redis(url: str, prefix: str, phrase: str) -> list[str]:
    wanted = _forms(phrase)
    client = redis.Redis.from_url(url)
    try:
        found = []
        for key in client.scan_iter(match=prefix + "*", count=500):
            kind = client.type(key).decode()
            values: list[bytes] = []
            if kind == "string":
                values = [client.get(key) or b""]
            elif kind == "hash":
                values = [v for kv in client.hgetall(key).items() for v in kv]
            elif kind == "list":
                values = list(client.lrange(key, 0, -1))
            elif kind == "set":
                values = list(client.smembers(key))
            elif kind == "zset":
                values = list(client.zrange(key, 0, -1))
            elif kind == "stream":
                values = [v for _, f in client.xrange(key) for kv in f.items() for v in kv]
            if any(w in v.lower() for v in values for w in wanted):
                found.append(key.decode())
        return found
    finally:
        client.close()


def leftovers(where: dict[str, Any], phrase: str) -> list[str]:
    found = scan_files(where["data_dir"], phrase)
    if where["kind"] == "mongo+redis":
        found += scan_mongo(where["mongo_uri"], where["db"], phrase)
        found += scan_redis(where["redis_url"], where["prefix"], phrase)
    return found


async def spread_alices_words(bot: Bot) -> None:
    """Alice's words travel: into Bob's turns in a shared thread (the parrot quotes them),
    the thread's summary, index entries, Bob's DM (recalled from the public channel), a
    consolidated memory."""
    await bot.say("UA", ALICE_WORDS, C1_THREAD)
    await bot.say("UB", BOB_WORDS, C1_THREAD)
    for n in range(4):
        await bot.say("UB", f"what did she say about the cat, question {n}?", C1_THREAD)
    await bot.settle()
    sent = await bot.say("UB", "what was that about the locker combination and the cat?", dm("UB"))
    assert "Whiskerton" in sent  # recalled from the public channel into Bob's DM
    await build_consolidator(bot.app).run()
    await bot.settle()


async def test_forget_all_leaves_no_copy_and_keeps_everyone_elses_words(backend: Any) -> None:
    bot, where = backend
    await spread_alices_words(bot)
    for phrase in ALICE_PHRASES:
        assert leftovers(where, phrase), f"the oracle finds nothing before: {phrase}"
    bob = PersonKey("slack", "T1", "UB")
    bobs_before = await bot.app.store.sessions_of_speaker(bob)

    reply = await bot.command("UA", "forget all")
    assert "Receipt" in reply
    await bot.settle()

    app = bot.app
    for phrase in ALICE_PHRASES:
        found = await audit(phrase=phrase, person=None, store=app.store, cache=app.cache)
        assert found == [], (phrase, found)
        assert await run_audit(app.settings, "slack:T1:UA", phrase) == 0, phrase  # the CLI's
        assert leftovers(where, phrase) == [], phrase
    # Nothing of Bob's is lost: his words, his sessions, his turns in the shared thread.
    assert leftovers(where, "zebra-wiki-88")
    assert await app.store.sessions_of_speaker(bob) == bobs_before
    # And a later request of Bob's carries none of Alice's words.
    for place in (C1_THREAD, dm("UB")):
        sent = await bot.say("UB", "what about the cat called Mr Whiskerton and 4471?", place)
        assert "combination is 4471" not in sent and "is called Mr Whiskerton" not in sent


async def test_forget_one_fact_takes_its_remember_turn_and_stays_forgotten(
    backend: Any,
) -> None:
    bot, where = backend
    await bot.say("UA", "please remember that I am allergic to pangolin-scales-5", C1)
    await bot.say("UA", "what do you know about me?", C1)
    person = PersonKey("slack", "T1", "UA")
    (fact,) = [f for f in await bot.app.store.list_facts(person) if "pangolin" in f.text]
    assert leftovers(where, "pangolin-scales-5")

    await bot.command("UA", f"forget {fact.id}")

    sent = await bot.say("UA", "what am I allergic to?", C1)
    assert "pangolin-scales-5" not in sent
    assert '"remember"' not in sent.split('"tools"')[0]  # no remember call left in history
    assert leftovers(where, "pangolin-scales-5") == []
    # The next consolidation reads the same messages and does not make it again.
    await build_consolidator(bot.app).run()
    assert not [f for f in await bot.app.store.list_facts(person) if "pangolin" in f.text]


async def test_a_platform_delete_leaves_no_copy_in_the_conversation(backend: Any) -> None:
    """Alice deletes her message on the platform: gone from the store, from the bot's replies
    in Bob's later turns that repeated it, from the index and the summary; Bob's words stay."""
    bot, where = backend
    await bot.say("UA", ALICE_WORDS, C1_THREAD, message_id="1700.5")
    await bot.say("UB", BOB_WORDS, C1_THREAD)
    for n in range(3):
        sent = await bot.say("UB", f"what did she say, question {n}?", C1_THREAD)
        assert "Whiskerton" in sent  # the parrot repeats Alice's turn in Bob's
    await bot.settle()
    assert leftovers(where, "Whiskerton")

    change = await bot.app.message_deleted(
        MessageRef("slack", "T1", ("1700.5",), channel=C1_THREAD.channel)
    )
    assert not change.failed
    await bot.settle()

    for phrase in ALICE_PHRASES:
        found = await audit(phrase=phrase, person=None, store=bot.app.store, cache=bot.app.cache)
        assert found == [], (phrase, found)
        assert leftovers(where, phrase) == [], phrase
    assert leftovers(where, "zebra-wiki-88")  # Bob's words are his
    sent = await bot.say("UB", "and what about the cat?", C1_THREAD)
    assert "Whiskerton" not in sent and "combination is 4471" not in sent


async def test_a_summary_drawing_on_recalled_memories_goes_with_their_author(
    backend: Any,
) -> None:
    """A summary paraphrases, so quotes cannot be cut from it: a summary of Bob's DM whose turns
    had Alice's memories recalled into them names her among those it draws on, and goes (to be
    rebuilt) when she asks to be forgotten."""
    from bot.keys import SessionKey

    bot, _ = backend
    await bot.say("UA", ALICE_WORDS, C1_THREAD)
    await bot.say("UB", BOB_WORDS, C1_THREAD)
    await bot.settle()
    for n in range(4):
        await bot.say("UB", f"remind me about the locker combination and the cat {n}", dm("UB"))
    await bot.settle()
    bobs_dm = SessionKey("slack", "T1", dm("UB").channel)
    state = await bot.app.store.get_state(bobs_dm)
    assert state is not None and state.summary, "Bob's DM was summarised"
    assert "slack:T1:UA" in state.summary_speakers  # her memories were recalled there

    await bot.command("UA", "forget all")

    state = await bot.app.store.get_state(bobs_dm)
    assert state is not None and state.summary == "" and state.summary_upto_seq == 0
