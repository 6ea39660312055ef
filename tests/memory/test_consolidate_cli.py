"""`bot consolidate` as operators run it (subprocesses), on SQLite and the MongoDB-protocol
server: the schedule, a run, a second run that does nothing, a run killed halfway (SIGKILL) then
finished with the same end state as one clean run, and two runs started at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.keys import SessionKey
from bot.stores.factory import open_store
from bot.stores.protocols import Store
from testkit.fakes.openai_server import FakeOpenAI
from testkit.memory_seed import PEOPLE, seed


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(latency=0.02).start_in_thread()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "mongo"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Environment naming a fresh store (call again for another one)."""
    if request.param == "sqlite":
        return {"BOT_DATA_DIR": str(tmp_path / f"d{uuid.uuid4().hex[:6]}")}
    uri: str = request.getfixturevalue("mongo_uri")
    return {"MONGODB_URI": uri, "MONGODB_DB": f"c{uuid.uuid4().hex[:10]}"}


def another(place: dict[str, str]) -> dict[str, str]:
    if "MONGODB_DB" in place:
        return {**place, "MONGODB_DB": f"c{uuid.uuid4().hex[:10]}"}
    return {"BOT_DATA_DIR": place["BOT_DATA_DIR"] + "-2"}


@asynccontextmanager
async def opened(env: dict[str, str]) -> AsyncIterator[Store]:
    store = await open_store(
        mongodb_uri=env.get("MONGODB_URI"),
        mongodb_db=env.get("MONGODB_DB", "bot"),
        data_dir=Path(env.get("BOT_DATA_DIR", "/nonexistent")),
    )
    try:
        yield store
    finally:
        await store.close()


def environment(fake: FakeOpenAI, place: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS"))
    }
    env.update(
        {
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": fake.base_url,
            "BOT_CONSOLIDATE_CONCURRENCY": "1",
            "BOT_MODEL_RETRIES": "0",
            **place,
        }
    )
    return env


def consolidate(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "consolidate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).parent,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


async def snapshot(store: Store) -> dict[str, Any]:
    facts = {
        p.user: sorted(
            (f.key or "", f.text, f.source, f.live)
            for f in await store.list_facts(p.key, history=True)
        )
        for p in PEOPLE
    }
    states = {}
    for sid in sorted(await store.session_heads()):
        state = await store.get_state(SessionKey.parse(sid))
        states[sid] = (state.consolidated_upto_seq, state.consolidation) if state else None
    return {"facts": facts, "states": states}


async def test_consolidate_cli(fake: FakeOpenAI, place: dict[str, str]) -> None:
    env = environment(fake, place)
    clean_place = another(place)
    clean_env = environment(fake, clean_place)
    for where in (place, clean_place):
        async with opened(where) as store:
            await seed(store, days=3)

    code, out, err = finish(consolidate(env))
    assert code == 0 and "Next consolidation:" in out and "03:00 UTC" in out, out + err

    # One clean run (the reference end state).
    code, out, err = finish(consolidate(clean_env, "--now"))
    assert code == 0, out + err
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert lines and "add" in lines[0] and "Traceback" not in err  # one line per session
    async with opened(clean_place) as store:
        clean = await snapshot(store)
    assert any(clean["facts"].values())

    # Killed at about half, then run again: the same end state.
    proc = consolidate(env, "--now")
    assert proc.stdout is not None
    total = None
    for line in proc.stdout:
        if line.startswith("Consolidating"):
            total = int(line.split()[1])
        if line.startswith("[") and total and int(line[1:].split("/")[0]) >= total // 2:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    asked = len(fake.requests)
    code, out, err = finish(consolidate(env, "--now"))
    assert code == 0, out + err
    async with opened(place) as store:
        assert await snapshot(store) == clean

    # Again: nothing to do, no model request.
    asked = len(fake.requests)
    code, out, err = finish(consolidate(env, "--now"))
    assert code == 0 and "0 session(s)" in out, out
    assert len(fake.requests) == asked

    # Two at once over new messages: one runs, the other names the holder and exits 0.
    if "MONGODB_URI" in place:
        return  # the lease contract runs on both stores (tests/stores); once is enough here
    async with opened(place) as store:
        await seed(store, days=3, seed_value=99)
    fake.latency = 0.2
    first, second = consolidate(env, "--now"), consolidate(env, "--now")
    results = [finish(first), finish(second)]
    assert [r[0] for r in results] == [0, 0], results
    busy = [r for r in results if "already running (lease held by" in r[1]]
    assert len(busy) == 1, results
