"""Reconciliation: the five outcomes and the guards around the model's answer."""

from __future__ import annotations

import asyncio
import json

from bot.keys import PersonKey
from bot.memory.reconcile import Candidate, Reconciler
from bot.memory.structured import JsonAsker
from bot.model import ModelClient
from bot.stores.sqlite import SqliteStore
from testkit.fakes.openai_server import FakeOpenAI, status, text

ALICE = PersonKey("test", "T1", "U1")


def reconciler(store: SqliteStore, model: ModelClient | None) -> Reconciler:
    return Reconciler(store, JsonAsker(model) if model is not None else None)


def verdict(event: str, target: str = "", key: str = "", txt: str = "") -> str:
    return json.dumps(
        {"event": event, "target_id": target, "key": key, "text": txt, "reason": "scripted"}
    )


async def test_a_changed_diet_updates_and_keeps_history(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = reconciler(sqlite_store, model)
    first = await rec.reconcile(ALICE, Candidate("I am vegetarian", key="diet", explicit=True))
    assert first.outcome == "ADD" and not fake_openai.requests  # nothing to reconcile against
    second = await rec.reconcile(ALICE, Candidate("I eat fish now", explicit=True))
    assert second.outcome == "UPDATE" and second.closed is not None
    assert second.closed.id == first.fact.id if first.fact else False
    (live,) = await sqlite_store.list_facts(ALICE)
    assert "pescatarian" in live.text and live.key == "diet" and live.replaces == [second.closed.id]
    assert len(await sqlite_store.list_facts(ALICE, history=True)) == 2
    schema = fake_openai.requests[-1]["response_format"]
    assert schema["json_schema"]["name"] == "fact_reconcile"  # structured output, no tools
    assert "tools" not in fake_openai.requests[-1]


async def test_near_duplicates_are_noop_without_a_model_call(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = reconciler(sqlite_store, model)
    await rec.reconcile(ALICE, Candidate("Prefers metric units", key="preferred_units"))
    for again in ("prefers metric units.", "Prefers  Metric Units!", "Prefer metric unit"):
        decision = await rec.reconcile(ALICE, Candidate(again))
        assert decision.outcome == "NOOP", again
    assert fake_openai.requests == []
    assert len(await sqlite_store.list_facts(ALICE, history=True)) == 1


async def test_greetings_moods_guesses_and_questions_are_rejected_by_rule(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = reconciler(sqlite_store, model)
    for said in (
        "Hello there!",
        "thanks",
        "I'm tired today",
        "I am so hungry right now",
        "Maybe I'll move to Porto",
        "Do you like jazz?",
    ):
        decision = await rec.reconcile(ALICE, Candidate(said, source="inferred"))
        assert decision.outcome == "REJECT", said
    assert fake_openai.requests == [] and await sqlite_store.list_facts(ALICE) == []


async def test_an_update_of_another_subject_becomes_an_add(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = reconciler(sqlite_store, model)
    city = await rec.reconcile(ALICE, Candidate("Lives in Lyon", key="home_city"))
    assert city.fact is not None
    # A model that retires an unrelated fact (the temporal-graph failure): refused.
    fake_openai.push(text(verdict("UPDATE", city.fact.id, "drink", "Prefers tea")))
    decision = await rec.reconcile(ALICE, Candidate("Prefers tea", key="drink"))
    assert decision.outcome == "ADD" and decision.closed is None
    fake_openai.push(text(verdict("DELETE", city.fact.id, "job")))
    decision = await rec.reconcile(ALICE, Candidate("Works as a nurse", key="job"))
    assert decision.outcome == "ADD"
    texts = sorted(f.text for f in await sqlite_store.list_facts(ALICE))
    assert texts == ["Lives in Lyon", "Prefers tea", "Works as a nurse"]


async def test_inferences_and_tool_data_never_replace_what_the_person_said(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = reconciler(sqlite_store, model)
    said = await rec.reconcile(ALICE, Candidate("Is vegetarian", key="diet", explicit=True))
    assert said.fact is not None
    fake_openai.push(text(verdict("UPDATE", said.fact.id, "diet", "Eats meat")))
    inferred = await rec.reconcile(ALICE, Candidate("Eats meat", key="diet", source="inferred"))
    assert inferred.outcome == "REJECT" and "outranked" in inferred.reason
    fake_openai.push(text(verdict("DELETE", said.fact.id, "diet")))
    tool = await rec.reconcile(ALICE, Candidate("Ordered a steak", key="diet", source="tool"))
    assert tool.outcome == "REJECT"
    (live,) = await sqlite_store.list_facts(ALICE)
    assert live.id == said.fact.id
    # The person themselves may change it.
    own = await rec.reconcile(ALICE, Candidate("I eat fish now", key="diet", explicit=True))
    assert own.outcome == "UPDATE"


async def test_an_inferred_fact_restated_by_the_person_becomes_theirs(
    sqlite_store: SqliteStore, model: ModelClient
) -> None:
    rec = reconciler(sqlite_store, model)
    await rec.reconcile(ALICE, Candidate("Prefers tea", key="drink", source="inferred"))
    decision = await rec.reconcile(ALICE, Candidate("prefers tea.", explicit=True))
    assert decision.outcome == "UPDATE"
    (live,) = await sqlite_store.list_facts(ALICE)
    assert live.source == "user"


async def test_a_failing_model_falls_back_to_rules(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = reconciler(sqlite_store, model)
    await rec.reconcile(ALICE, Candidate("Is vegetarian", key="diet"))
    fake_openai.push(status(500))
    decision = await rec.reconcile(ALICE, Candidate("Is vegan", key="diet"))
    assert decision.outcome == "UPDATE"  # same key
    fake_openai.push(text("not json at all"))
    decision = await rec.reconcile(ALICE, Candidate("Lives in Lyon", key="home_city"))
    assert decision.outcome == "ADD"
    assert [f.text for f in await sqlite_store.list_facts(ALICE)] == ["Is vegan", "Lives in Lyon"]


async def test_servers_without_json_schema_get_json_mode(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = reconciler(sqlite_store, model)
    await rec.reconcile(ALICE, Candidate("Is vegetarian", key="diet"))
    fake_openai.push(status(400, message="response_format json_schema is not supported"))
    decision = await rec.reconcile(ALICE, Candidate("I eat fish now", key="diet"))
    assert decision.outcome == "UPDATE"
    formats = [r.get("response_format", {}).get("type") for r in fake_openai.requests]
    assert formats == ["json_schema", "json_object"]
    await rec.reconcile(ALICE, Candidate("Lives in Lyon", key="home_city"))
    assert fake_openai.requests[-1]["response_format"]["type"] == "json_object"  # remembered


async def test_an_explicit_request_is_never_rejected_by_the_model(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    rec = reconciler(sqlite_store, model)
    await rec.reconcile(ALICE, Candidate("Lives in Lyon", key="home_city"))
    fake_openai.push(text(verdict("REJECT")))
    decision = await rec.reconcile(ALICE, Candidate("My locker is 42", explicit=True))
    assert decision.outcome == "ADD"


async def test_concurrent_updates_of_one_subject_leave_one_live_fact(
    sqlite_store: SqliteStore,
) -> None:
    rec = reconciler(sqlite_store, None)
    await rec.reconcile(ALICE, Candidate("Is vegetarian", key="diet"))
    said = ["Is vegan", "Eats fish", "Eats meat", "Is vegetarian again"]
    await asyncio.gather(*(rec.reconcile(ALICE, Candidate(s, key="diet")) for s in said))
    live = await sqlite_store.list_facts(ALICE)
    assert len(live) == 1 and live[0].key == "diet"
    assert len(await sqlite_store.list_facts(ALICE, history=True)) == 5
