"""Reconciliation keeps a fact's time and audience: an older statement never closes a newer
fact; a fact known only where the candidate's place may not use it is widened or copied, never
silently matched; a model's merged text never carries words of facts hidden from that place."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from bot.keys import PersonKey
from bot.memory.reconcile import Candidate, Reconciler
from bot.memory.structured import JsonAsker
from bot.model import ModelClient
from bot.stores.sqlite import SqliteStore
from testkit.fakes.openai_server import FakeOpenAI, text

ALICE = PersonKey("slack", "T1", "U1")
PUBLIC = "public"
IN_G1 = "private:slack:T1:G1"
IN_G2 = "private:slack:T1:G2"
IN_DM = "dm:slack:T1:D1"
JAN = datetime(2026, 1, 10, 10, tzinfo=UTC)
MAR = datetime(2026, 3, 10, 10, tzinfo=UTC)


def verdict(event: str, target: str = "", key: str = "", txt: str = "") -> str:
    return json.dumps(
        {"event": event, "target_id": target, "key": key, "text": txt, "reason": "scripted"}
    )


async def test_an_older_statement_never_closes_a_newer_fact(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    for asker in (JsonAsker(model), None):  # the model's UPDATE, and the rules' same key
        await sqlite_store.delete_all_facts(ALICE)
        rec = Reconciler(sqlite_store, asker)
        march = await rec.reconcile(
            ALICE, Candidate("I live in Munich", key="home_city", said_at=MAR, audience=PUBLIC)
        )
        january = await rec.reconcile(
            ALICE, Candidate("I live in Berlin", key="home_city", said_at=JAN, audience=PUBLIC)
        )
        assert january.outcome == "REJECT" and january.reason == "older than what is known"
        (live,) = await sqlite_store.list_facts(ALICE, history=True)
        assert march.fact is not None and live.id == march.fact.id and live.valid_from == MAR
    # A newer one does replace it, and the old version is closed when the new one was said.
    april = datetime(2026, 4, 1, tzinfo=UTC)
    later = await Reconciler(sqlite_store, None).reconcile(
        ALICE, Candidate("I live in Hamburg", key="home_city", said_at=april, audience=PUBLIC)
    )
    assert later.outcome == "UPDATE" and later.closed is not None
    closed = [f for f in await sqlite_store.list_facts(ALICE, history=True) if not f.live]
    assert [(f.valid_from, f.valid_to) for f in closed] == [(MAR, april)]


async def test_a_fact_from_a_dm_said_again_in_public_is_widened(
    sqlite_store: SqliteStore, fake_openai: FakeOpenAI
) -> None:
    rec = Reconciler(sqlite_store, None)
    await rec.reconcile(ALICE, Candidate("Prefers celsius", said_at=JAN, audience=IN_DM))
    again = await rec.reconcile(ALICE, Candidate("prefers celsius", said_at=MAR, audience=PUBLIC))
    assert again.outcome == "UPDATE"
    (live,) = await sqlite_store.list_facts(ALICE)
    assert (live.text, live.audience) == ("prefers celsius", PUBLIC)
    # Said once more in the DM (which may use public facts): nothing changes.
    assert (await rec.reconcile(ALICE, Candidate("Prefers celsius", audience=IN_DM))).outcome == (
        "NOOP"
    )
    assert [f.audience for f in await sqlite_store.list_facts(ALICE)] == [PUBLIC]


async def test_two_private_channels_each_keep_a_copy_and_a_change_closes_both(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = Reconciler(sqlite_store, JsonAsker(model))
    await rec.reconcile(ALICE, Candidate("I am vegetarian", key="diet", audience=IN_G1))
    copy = await rec.reconcile(ALICE, Candidate("I am vegetarian", key="diet", audience=IN_G2))
    assert copy.outcome == "ADD"
    assert sorted(f.audience for f in await sqlite_store.list_facts(ALICE)) == [IN_G1, IN_G2]
    changed = await rec.reconcile(ALICE, Candidate("I eat fish now", key="diet", audience=IN_G2))
    assert changed.outcome == "UPDATE"
    (live,) = await sqlite_store.list_facts(ALICE)
    assert "fish" in live.text and live.audience == IN_G2


async def test_a_merge_never_carries_words_of_a_fact_hidden_here(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = Reconciler(sqlite_store, JsonAsker(model))
    await sqlite_store.add_fact(ALICE, "Allergic to peanuts", key="allergy", audience=IN_DM)
    veg = await sqlite_store.add_fact(ALICE, "Is vegetarian", key="diet", audience=PUBLIC)
    fake_openai.push(text(verdict("UPDATE", veg.id, "diet", "Eats fish, allergic to peanuts")))
    decision = await rec.reconcile(ALICE, Candidate("I eat fish now", key="diet", audience=PUBLIC))
    assert decision.outcome == "UPDATE" and decision.fact is not None
    assert decision.fact.text == "I eat fish now"  # the candidate's words, not the merge
    # Where the hidden fact could be used (a DM), the model's merge stands.
    fish = decision.fact
    fake_openai.push(text(verdict("UPDATE", fish.id, "diet", "Eats fish and seafood")))
    merged = await rec.reconcile(ALICE, Candidate("I eat seafood too", key="diet", audience=IN_DM))
    assert merged.fact is not None and merged.fact.text == "Eats fish and seafood"


async def test_a_noop_on_a_fact_hidden_here_keeps_one_for_this_audience(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = Reconciler(sqlite_store, JsonAsker(model))
    vegan = await sqlite_store.add_fact(ALICE, "Is vegan", key="diet", audience=IN_DM)
    fake_openai.push(text(verdict("NOOP", vegan.id)))
    decision = await rec.reconcile(
        ALICE, Candidate("Eats no animal products", key="diet", audience=PUBLIC)
    )
    assert decision.outcome == "ADD"
    public = await sqlite_store.list_facts(ALICE, audiences=[PUBLIC])
    assert [f.text for f in public] == ["Eats no animal products"]


async def test_a_merge_with_a_hidden_target_keeps_the_candidates_words(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    """Replacing a fact said in a DM from a public channel is fine (it is outdated), but the
    new public version holds nothing of the DM one."""
    rec = Reconciler(sqlite_store, JsonAsker(model))
    veg = await sqlite_store.add_fact(
        ALICE, "Is vegetarian and allergic to peanuts", key="diet", audience=IN_DM
    )
    fake_openai.push(text(verdict("UPDATE", veg.id, "diet", "Eats fish, allergic to peanuts")))
    decision = await rec.reconcile(ALICE, Candidate("I eat fish now", key="diet", audience=PUBLIC))
    assert decision.outcome == "UPDATE" and decision.fact is not None
    assert (decision.fact.text, decision.fact.audience) == ("I eat fish now", PUBLIC)
