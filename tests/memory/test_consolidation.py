"""The consolidation over a seeded month: clean facts, idempotent, one runner at a time, erasure
wins, retention after consolidation only."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bot.keys import PersonKey, SessionKey
from bot.memory.consolidation import Consolidator
from bot.memory.reconcile import Reconciler
from bot.memory.structured import JsonAsker
from bot.model import ModelClient
from bot.stores.protocols import Store
from bot.stores.records import NewMessage, utcnow
from bot.stores.sqlite import SqliteStore
from testkit.fakes.openai_server import FakeOpenAI, text
from testkit.memory_seed import BOT_RESTATES, PEOPLE, expected_live, seed
from tests.helpers import say


def consolidator(store: Store, model: ModelClient, holder: str = "h1", **kw: Any) -> Consolidator:
    return Consolidator(
        store, Reconciler(store, JsonAsker(model)), JsonAsker(model), holder=holder, **kw
    )


async def live_facts(store: Store) -> dict[str, list[tuple[str | None, str, str]]]:
    return {
        p.user: sorted((f.key, f.text, f.source) for f in await store.list_facts(p.key))
        for p in PEOPLE
    }


async def test_a_month_becomes_clean_facts_and_a_second_run_does_nothing(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    await seed(sqlite_store, days=30)
    report = await consolidator(sqlite_store, model).run()
    assert report.ran and report.failures == 0 and report.sessions > 0
    assert report.outcomes["REJECT"] > 0 and report.outcomes["NOOP"] > 0
    for person in PEOPLE:
        live = await sqlite_store.list_facts(person.key)
        want = expected_live(person)
        assert sorted(f.key or "" for f in live) == sorted(want), (person.user, live)
        for fact in live:
            assert want[fact.key or ""].lower() in fact.text.lower(), fact
            assert fact.source_messages and fact.source == "user"
        texts = " | ".join(f.text for f in await sqlite_store.list_facts(person.key, history=True))
        for junk in ("tired", "hungry", "maybe", "Madrid", "vegan", "lentil", "degrees"):
            assert junk.lower() not in texts.lower(), (person.user, texts)
    restated = {r.lower() for r in BOT_RESTATES}
    for person in PEOPLE:
        for fact in await sqlite_store.list_facts(person.key, history=True):
            assert fact.text.lower() not in restated  # the bot's words are never their facts

    before, asked = await live_facts(sqlite_store), len(fake_openai.requests)
    again = await consolidator(sqlite_store, model).run()
    assert (again.sessions, again.steps, again.tokens) == (0, 0, 0)
    assert len(fake_openai.requests) == asked  # no model request
    assert await live_facts(sqlite_store) == before


async def test_nightly_runs_close_the_old_diet(
    sqlite_store: SqliteStore, model: ModelClient
) -> None:
    alice = PEOPLE[0].key
    dm = SessionKey("test", "T1", "D-UA")
    for day, said in ((1, "I am vegetarian."), (4, "I eat fish now.")):
        await sqlite_store.append(
            dm,
            [
                NewMessage(role="user", content=said, speaker=alice.id, turn_id=f"d{day}"),
                NewMessage(
                    role="assistant",
                    content="As a vegetarian, you might like the lentil soup.",
                    speaker=alice.id,
                    turn_id=f"d{day}",
                ),
            ],
        )
        await consolidator(sqlite_store, model).run()  # the night after
    (live,) = await sqlite_store.list_facts(alice)
    assert "pescatarian" in live.text
    history = await sqlite_store.list_facts(alice, history=True)
    assert [f.text for f in history if not f.live] == ["Is vegetarian"]


async def test_an_inference_never_replaces_a_statement(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    alice = PEOPLE[0].key
    dm = SessionKey("test", "T1", "D-UA")
    await sqlite_store.add_fact(alice, "Is vegetarian", key="diet")
    (msg,) = await sqlite_store.append(
        dm, [NewMessage(role="user", content="steak was great", speaker=alice.id, turn_id="t")]
    )
    extraction = {
        "facts": [
            {
                "person": alice.id,
                "text": "Eats meat",
                "key": "diet",
                "source": "inferred",
                "message": f"{dm.id}#{msg.seq}",
            }
        ],
        "memories": [],
    }
    fake_openai.push(text(json.dumps(extraction)))
    report = await consolidator(sqlite_store, model).run()
    assert report.outcomes["REJECT"] == 1
    (live,) = await sqlite_store.list_facts(alice)
    assert live.text == "Is vegetarian"


async def test_two_runners_one_runs_the_other_reports_the_holder(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    await seed(sqlite_store, days=3)
    fake_openai.latency = 0.05
    first, second = await asyncio.gather(
        consolidator(sqlite_store, model, "host:1:a").run(),
        consolidator(sqlite_store, model, "host:2:b").run(),
    )
    ran = [r for r in (first, second) if r.ran]
    busy = [r for r in (first, second) if not r.ran]
    assert len(ran) == 1 and len(busy) == 1
    assert busy[0].holder in ("host:1:a", "host:2:b") and busy[0].sessions == 0
    # The lease is released at the end: the next run takes it.
    assert (await consolidator(sqlite_store, model, "host:3:c").run()).ran


async def test_erasure_during_consolidation_wins(make_app: Any, fake_openai: FakeOpenAI) -> None:
    from bot.core import CommandRequest
    from bot.memory.audit import audit
    from bot.memory.nightly import build_consolidator

    app = await make_app()
    await seed(app.store, days=6)
    gate, entered = asyncio.Event(), asyncio.Event()
    brain = fake_openai.brain

    async def held(request: dict[str, Any]) -> Any:
        fmt = request.get("response_format") or {}
        if (fmt.get("json_schema") or {}).get("name") == "fact_reconcile":
            entered.set()
            await gate.wait()
        return brain(request)

    fake_openai.brain = held
    run = asyncio.create_task(build_consolidator(app).run())
    await entered.wait()  # mid-run, between extraction and its application
    forget = asyncio.create_task(
        app.handle_command(CommandRequest("test", "T1", "C1", "UA", "memory", "forget all"))
    )
    await asyncio.sleep(0)
    gate.set()
    reply = await forget
    report = await run
    assert reply.ok and report.ran
    await build_consolidator(app).run()  # what was left for later
    assert await app.store.list_facts(PEOPLE[0].key, history=True) == []
    for phrase in ("I am vegetarian", "I eat fish now", "Eats fish now"):
        found = await audit(phrase=phrase, person=PEOPLE[0].key, store=app.store, cache=app.cache)
        assert found == [], (phrase, found)
    assert await app.store.list_facts(PEOPLE[1].key)  # others intact


async def test_retention_prunes_only_what_was_consolidated(
    sqlite_store: SqliteStore, model: ModelClient
) -> None:
    dm = SessionKey("test", "T1", "D-UA")
    alice = PEOPLE[0].key
    await sqlite_store.append(
        dm, [NewMessage(role="user", content="I have a cat.", speaker=alice.id, turn_id="a")]
    )
    assert await sqlite_store.prune_messages(dm, upto_seq=0, before=utcnow()) == 0
    await consolidator(sqlite_store, model).run()
    await sqlite_store.append(
        dm, [NewMessage(role="user", content="I live in Oslo.", speaker=alice.id, turn_id="b")]
    )
    c = consolidator(sqlite_store, model, retention_days=1)
    c.retention_days = 1
    state = await sqlite_store.get_state(dm)
    assert state is not None and state.consolidated_upto_seq == 1
    # Everything is younger than a day: nothing goes; with a cutoff in the future only the
    # consolidated message goes (what the nightly run does with BOT_RETENTION_DAYS).
    assert await sqlite_store.prune_messages(dm, upto_seq=1, before=utcnow()) == 1
    assert [m.content for m in await sqlite_store.recent(dm, limit=5)] == ["I live in Oslo."]


async def test_the_bot_schedules_the_nightly_run_and_reports_it(make_app: Any) -> None:
    from bot.memory.nightly import build_consolidator, next_run
    from bot.metrics import REGISTRY

    app = await make_app(bot_consolidate_cron="30 2 * * *")
    await app.start()
    assert app.nightly is not None
    (job,) = app.nightly.scheduler.get_jobs()
    fire = job.next_run_time
    assert (fire.hour, fire.minute, fire.utcoffset().total_seconds()) == (2, 30, 0)
    assert fire == next_run("30 2 * * *")
    await seed(app.store, days=2)
    before = REGISTRY.get_sample_value("bot_consolidation_sessions_total") or 0
    report = await build_consolidator(app).run()
    after = REGISTRY.get_sample_value("bot_consolidation_sessions_total") or 0
    assert report.sessions > 0 and after - before == report.sessions
    adds = REGISTRY.get_sample_value("bot_consolidation_candidates_total", {"outcome": "ADD"})
    assert adds and adds >= report.outcomes["ADD"]
    await app.close()
    assert not app.nightly.scheduler.running


async def test_memories_go_to_the_index_and_forget_all_takes_them_out(
    make_app: Any,
) -> None:
    from bot.core import CommandRequest
    from bot.memory.audit import audit
    from bot.memory.nightly import build_consolidator
    from bot.stores.memory_index import MemoryScope

    app = await make_app()
    await seed(app.store, days=4)
    report = await build_consolidator(app).run()
    assert report.memories > 0
    index = app.memory_index
    assert index is not None
    alice, bob = PEOPLE[0].key, PEOPLE[1].key
    mine = await index.entries_of_person(alice)
    assert mine and all(e.kind == "memory" and alice.id in e.people for e in mine)
    assert all(e.source_ids and e.place.startswith("test:T1:") for e in mine)
    dm = await index.changes(MemoryScope(alice.team_key, places=("test:T1:D-UA",)))
    assert any(e.people == [alice.id] for e in dm.entries)
    again = await build_consolidator(app).run()  # idempotent: nothing new in the index
    assert again.memories == 0 and len(await index.entries_of_person(alice)) == len(mine)

    reply = await app.handle_command(
        CommandRequest("test", "T1", "D-UA", "UA", "memory", "forget all")
    )
    assert reply.ok and f"{len(mine)} long-term memory(ies)" in reply.text, reply.text
    assert await index.entries_of_person(alice) == []
    found = await audit(phrase="I am vegetarian", person=alice, store=app.store, cache=app.cache)
    assert found == []
    # Bob's own memories stay (shared ones with Alice were dropped: see bot.memory.index_tiers).
    assert any(e.people == [bob.id] for e in await index.entries_of_person(bob))


async def test_pending_work_read_before_an_erasure_is_extracted_again(
    sqlite_store: SqliteStore, model: ModelClient, fake_openai: FakeOpenAI
) -> None:
    from bot.stores.records import PendingConsolidation, PendingFact, SessionState

    dm = SessionKey("test", "T1", "D-UB")
    bob = PEOPLE[1].key
    (said,) = await sqlite_store.append(
        dm, [NewMessage(role="user", content="I have a cat.", speaker=bob.id, turn_id="t")]
    )
    stale = PendingConsolidation(
        upto_seq=said.seq,
        erasures=0,
        facts=[PendingFact(person=bob.id, text="Has a parrot", message=f"{dm.id}#1")],
    )
    # An erasure (of someone else) bumped the counter after this step was saved.
    assert await sqlite_store.put_state(
        dm, SessionState(session=dm.id, erasures=1, consolidation=stale)
    )
    report = await consolidator(sqlite_store, model).run()
    assert report.failures == 0
    assert [f.text for f in await sqlite_store.list_facts(bob)] == ["Has a cat"]
    state = await sqlite_store.get_state(dm)
    assert state is not None and state.consolidation is None
    assert state.consolidated_upto_seq == said.seq


async def test_concurrent_sessions_are_credited_their_own_counts(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    """Sessions consolidated at once: each session's progress line counts that session's facts
    (the oracle: the facts stored with that session as their source)."""
    from bot.memory.consolidation import ConsolidationReport
    from bot.memory.nightly import build_consolidator
    from bot.stores.records import Fact

    app = await make_app()
    said = {
        "C1": ["I am a beekeeper.", "I am learning Welsh.", "I am left-handed."],
        "C2": ["I am a night owl."],
        "C3": ["Is the build green?"],
    }
    for channel, lines in said.items():
        for line in lines:
            await say(app, line, user=f"U{channel}", channel=channel)
    fake_openai.latency = 0.05  # the sessions' steps interleave
    seen: dict[str, ConsolidationReport] = {}

    class Collect:
        def start(self, sessions: int) -> None:
            assert sessions == 3

        def step(self, session_id: str, report: ConsolidationReport) -> None:
            seen[session_id] = report

    consolidator = build_consolidator(app)
    consolidator.concurrency = 3
    total = await consolidator.run(progress=Collect())
    assert len(seen) == 3
    facts: list[Fact] = []
    for channel in said:
        facts += await app.store.list_facts(PersonKey("test", "T1", f"U{channel}"))
    for sid, report in seen.items():
        stored = [f for f in facts if f.session == sid]
        assert report.outcomes["ADD"] == len(stored), (sid, report.outcomes, stored)
    assert total.outcomes["ADD"] == len(facts) == 4
