"""What consolidation keeps of an extraction's facts: only a person's own words become their
facts (every cited message is theirs, the fact is found in it), dated when that message was said
and carrying the audience it was said to."""

from __future__ import annotations

import json
from typing import Any

from bot.keys import PersonKey, SessionKey
from bot.memory.extraction import extract
from bot.memory.fact_support import supported
from bot.memory.structured import JsonAsker
from bot.model import ModelClient
from bot.stores.records import NewMessage, StoredMessage
from bot.stores.sqlite import SqliteStore
from testkit.fakes.openai_server import FakeOpenAI, text

ALICE = PersonKey("slack", "T1", "UA")
BOB = PersonKey("slack", "T1", "UB")
PLACE = SessionKey("slack", "T1", "C1")


def turn(
    who: PersonKey, said: str, reply: str, n: int, meta: dict[str, Any] | None = None
) -> list[NewMessage]:
    return [
        NewMessage(
            role="user", content=said, speaker=who.id, turn_id=f"t{n}", meta=dict(meta or {})
        ),
        NewMessage(role="assistant", content=reply, speaker=who.id, turn_id=f"t{n}"),
    ]


def fact(who: PersonKey, txt: str, message: StoredMessage, source: str = "user") -> dict[str, str]:
    return {
        "person": who.id,
        "text": txt,
        "key": "",
        "source": source,
        "message": f"{message.session}#{message.seq}",
    }


async def extracted(
    store: SqliteStore,
    model: ModelClient,
    fake: FakeOpenAI,
    messages: list[StoredMessage],
    facts: list[dict[str, str]],
) -> tuple[list[tuple[str, str]], int]:
    fake.push(text(json.dumps({"facts": facts, "memories": []})))
    got = await extract(JsonAsker(model), messages, upto_seq=messages[-1].seq, erasures=0)
    return [(f.person, f.text) for f in got.pending.facts], got.dropped


async def test_a_fact_citing_another_persons_or_the_bots_message_is_dropped(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    stored = await sqlite_store.append(
        PLACE,
        [
            *turn(ALICE, "what's for lunch?", "As a vegan, you might like the lentil soup.", 1),
            *turn(BOB, "I am vegan.", "ok: I am vegan.", 2),
        ],
    )
    alice_q, bot_to_alice, bob_said, _ = stored
    kept, dropped = await extracted(
        sqlite_store,
        model,
        fake_openai,
        stored,
        [
            fact(ALICE, "Is vegan", bob_said),  # Bob's words filed under Alice
            fact(ALICE, "Is vegan", bot_to_alice),  # the bot's words, in Alice's own turn
            fact(BOB, "Is vegan", bob_said),  # Bob's words, Bob's fact
        ],
    )
    assert kept == [(BOB.id, "Is vegan")] and dropped == 2
    assert alice_q.speaker == bot_to_alice.speaker == ALICE.id  # the turn is hers, not the words


async def test_a_bot_relay_filed_under_her_adjacent_message_is_dropped(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    stored = await sqlite_store.append(
        PLACE,
        [
            *turn(BOB, "Alice moved to Paris, tell her I said hi", "Will do.", 1),
            *turn(ALICE, "ok thanks", "Bob says hi, and that you moved to Paris!", 2),
            *turn(ALICE, "I live in Lyon actually.", "ok: I live in Lyon actually.", 3),
            *turn(ALICE, "I am allergic to peanuts.", "Noted.", 4),
        ],
    )
    ok_thanks, lyon, peanuts = stored[2], stored[4], stored[6]
    kept, dropped = await extracted(
        sqlite_store,
        model,
        fake_openai,
        stored,
        [
            fact(ALICE, "Moved to Paris", ok_thanks),  # the relay, filed under her "ok thanks"
            fact(ALICE, "Lives in Paris", lyon),  # one word of hers, not the place
            fact(ALICE, "Lives in Lyon", lyon),
            fact(ALICE, "Alice is allergic to peanuts (nut allergy)", peanuts),
        ],
    )
    assert kept == [
        (ALICE.id, "Lives in Lyon"),
        (ALICE.id, "Alice is allergic to peanuts (nut allergy)"),
    ]
    assert dropped == 2


async def test_a_kept_fact_carries_its_messages_time_and_audience(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    group = SessionKey("slack", "T1", "G1")
    stored = await sqlite_store.append(
        group,
        [
            *turn(
                ALICE,
                "I prefer celsius.",
                "ok",
                1,
                {"sent_at": "2026-01-10T10:00:00+00:00", "audience": "private:slack:T1:G1"},
            ),
            # Written before messages carried their audience: only the flag of a private place.
            *turn(ALICE, "I have a dog.", "ok", 2, {"private_place": True}),
            *turn(ALICE, "I work as a nurse.", "ok", 3),  # no flag: a public channel
        ],
    )
    fake_openai.push(
        text(
            json.dumps(
                {
                    "facts": [
                        fact(ALICE, "Prefers celsius", stored[0]),
                        fact(ALICE, "Has a dog", stored[2]),
                        fact(ALICE, "Works as a nurse", stored[4]),
                    ],
                    "memories": [],
                }
            )
        )
    )
    got = await extract(JsonAsker(model), stored, upto_seq=stored[-1].seq, erasures=0)
    celsius, dog, nurse = got.pending.facts
    assert celsius.said_at is not None and celsius.said_at.isoformat().startswith("2026-01-10")
    assert celsius.audience == "private:slack:T1:G1"
    assert dog.audience == "dm:slack:T1:G1"  # private channel or DM: the narrowest
    assert dog.said_at == stored[2].created_at  # no platform time: when it was stored
    assert nurse.audience == "public"


async def test_a_legacy_tool_fact_takes_its_turns_audience(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    """Before messages carried their audience only the person's own message was flagged: a
    tool result of a turn said in a private place is as private as that message."""
    stored = await sqlite_store.append(
        PLACE,
        [
            NewMessage(
                role="user",
                content="where is my order W1?",
                speaker=ALICE.id,
                turn_id="t1",
                meta={"private_place": True},
            ),
            NewMessage(
                role="tool",
                content='{"ok": true, "data": {"order_id": "W1", "city": "Lyon"}}',
                speaker=ALICE.id,
                turn_id="t1",
                name="get_order_status",
                tool_call_id="c1",
                from_tool=True,
            ),
        ],
    )
    fake_openai.push(
        text(
            json.dumps(
                {
                    "facts": [fact(ALICE, "Order W1 ships to Lyon", stored[1], "tool")],
                    "memories": [],
                }
            )
        )
    )
    got = await extract(JsonAsker(model), stored, upto_seq=stored[-1].seq, erasures=0)
    (found,) = got.pending.facts
    assert found.source == "tool" and found.audience == "dm:slack:T1:C1"


def test_the_support_rule_keeps_paraphrases_and_drops_other_subjects() -> None:
    assert supported("Eats fish now (pescatarian)", ["I eat fish now."])
    assert supported("Is allergic to peanuts", ["I'm allergic to peanuts!"])
    assert supported("Has a dog", ["I have a dog"])
    assert supported("Alice prefers tea", ["I prefer tea"], names=["Alice"])
    assert supported("对花生过敏", ["请记住我对花生过敏"])
    assert not supported("Lives in Paris", ["I live in Lyon"])
    assert not supported("Is vegan", ["ok thanks"])
    assert not supported("Is", ["I am"])  # no content word at all
