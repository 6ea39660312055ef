"""Multi-workspace OAuth on the bot's own durable store (SQLite) instead of the in-memory one.

The flows of test_oauth_e2e.py (its `_install` helper, the same harness and FakeSlack), with a
real `SqliteStore` under the adapter's `SlackInstallationStorage` — as `bot slack` wires it
(`installation_docs(core.store)`, on the store's own connection). Installs survive a restart and
are shared by processes on one file.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from adapters.slack.installations import installation_docs
from adapters.slack.oauth import SlackInstallationStorage
from bot.app import BotApp
from bot.logsetup import JsonFormatter
from bot.stores.sqlite import SqliteStore
from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import SlackHarness
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore
from tests.slack.test_oauth_e2e import _install, refused

OpenStore = Callable[[], Awaitable[SqliteStore]]
NAMES = ("bot", "installer", "installer:UINSTALLER")


@pytest.fixture
async def open_sqlite(tmp_path: Path) -> AsyncIterator[OpenStore]:
    """Open SqliteStores on one file (one per "process"); all are closed afterwards."""
    opened: list[SqliteStore] = []

    async def open_one() -> SqliteStore:
        store = await SqliteStore.open(tmp_path / "data" / "bot.db")
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


def _storage(store: Any) -> SlackInstallationStorage:
    """Slack's installation storage on this store's connection, as `bot slack` builds it."""
    return installation_docs(store)


async def _start(start_harness: StartHarness, store: Any, core: Any = None) -> SlackHarness:
    return await start_harness(
        core if core is not None else EchoCore(),
        storage=_storage(store),
        bot_token=None,
        client_id="111.222",
        client_secret="client-secret",
    )


async def _docs(store: Any, team: str) -> dict[str, dict[str, Any]]:
    found = {name: await _storage(store).get_doc("-", team, name) for name in NAMES}
    return {name: doc for name, doc in found.items() if doc is not None}


async def _eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.02)


def _pending_states(store: SqliteStore) -> int:
    conn = sqlite3.connect(store.path)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM slack_oauth_states").fetchone()[0])
    finally:
        conn.close()


async def test_install_answer_and_uninstall_round_trip(
    start_harness: StartHarness,
    fake_slack: FakeSlack,
    open_sqlite: OpenStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    store = await open_sqlite()
    core = EchoCore()
    slack = await _start(start_harness, store, core)
    await _install(slack, fake_slack, "T2", "xoxb-team-two")
    docs = await _docs(store, "T2")
    assert set(docs) == set(NAMES)
    assert (docs["bot"]["bot_user_id"], docs["bot"]["bot_token"]) == ("UBT2", "xoxb-team-two")
    assert docs["installer"]["user_id"] == "UINSTALLER"
    assert _pending_states(store) == 0  # the state was single-use

    ts = await slack.mention("hi team two", channel="C22", team="T2", bot_user="UBT2")
    await slack.wait_done(ts)
    assert slack.replies("C22", thread_ts=ts) == ["echo: hi team two"]
    assert {c.token for c in fake_slack.calls if c.channel == "C22"} == {"xoxb-team-two"}

    await slack.send_event({"type": "app_uninstalled"}, team="T2")
    await _eventually(lambda: _no_docs(store, "T2"))
    before = refused(caplog, "T2")
    await slack.mention("still there?", channel="C23", team="T2", bot_user="UBT2")
    assert refused(caplog, "T2") == before + 2  # app_mention and message: both refused
    assert slack.replies("C23") == [] and len(core.messages) == 1
    # The bot's and adapter's own log lines never carry the token (slack_sdk's DEBUG dump of
    # the oauth.v2.access response does; bot.logsetup drops library records below WARNING).
    ours = [r for r in caplog.records if r.name.split(".")[0] in {"bot", "adapters"}]
    lines = [JsonFormatter().format(r) for r in ours]
    assert any("slack_installation_saved" in line for line in lines)
    assert not [line for line in lines if "xoxb-team-two" in line]


async def _no_docs(store: Any, team: str) -> bool:
    return not await _docs(store, team)


async def test_installs_survive_a_restart_and_are_shared_between_processes(
    start_harness: StartHarness, fake_slack: FakeSlack, open_sqlite: OpenStore
) -> None:
    first_store = await open_sqlite()
    first = await _start(start_harness, first_store)
    await _install(first, fake_slack, "TA", "xoxb-a")
    await first.close()
    await first_store.close()  # "restart": nothing of the first process is left

    store_b, store_c = await open_sqlite(), await open_sqlite()
    b = await _start(start_harness, store_b)
    c = await _start(start_harness, store_c)
    ts = await b.mention("after restart", channel="CA", team="TA", bot_user="UBTA")
    await b.wait_done(ts)
    assert b.replies("CA", thread_ts=ts) == ["echo: after restart"]

    # The install starts on one process and Slack redirects the browser to another.
    start = await b.http.get(b.url("/slack/install"), allow_redirects=False)
    state = parse_qs(urlparse(start.headers["Location"]).query)["state"][0]
    fake_slack.add_oauth_code("code-TB", team_id="TB", bot_token="xoxb-b", bot_user_id="UBTB")
    done = await c.http.get(
        c.url("/slack/oauth_redirect"),
        params={"code": "code-TB", "state": state},
        headers={"Cookie": f"slack-app-oauth-state={state}"},
    )
    assert done.status == 200, await done.text()
    ts = await b.mention("from b", channel="CB", team="TB", bot_user="UBTB")
    await b.wait_done(ts)
    assert {call.token for call in fake_slack.calls if call.channel == "CB"} == {"xoxb-b"}

    # The state was consumed by the other process: replaying the callback fails.
    replay = await b.http.get(
        b.url("/slack/oauth_redirect"),
        params={"code": "code-TB", "state": state},
        headers={"Cookie": f"slack-app-oauth-state={state}"},
    )
    assert replay.status == 401


async def test_a_revoked_bot_token_deletes_only_that_team(
    start_harness: StartHarness, fake_slack: FakeSlack, open_sqlite: OpenStore
) -> None:
    store = await open_sqlite()
    slack = await _start(start_harness, store)
    await _install(slack, fake_slack, "TA", "xoxb-a")
    await _install(slack, fake_slack, "TB", "xoxb-b")
    await slack.send_event(
        {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": ["UBTA"]}}, team="TA"
    )
    await _eventually(lambda: _no_docs(store, "TA"))  # without its bot the install is void
    assert set(await _docs(store, "TB")) == set(NAMES)


async def _missing(store: Any, team: str, name: str) -> bool:
    return await _storage(store).get_doc("-", team, name) is None


async def test_callback_with_forged_state_fails(
    start_harness: StartHarness, fake_slack: FakeSlack, open_sqlite: OpenStore
) -> None:
    store = await open_sqlite()
    slack = await _start(start_harness, store)
    fake_slack.add_oauth_code("code-x", team_id="TX", bot_token="xoxb-x")
    resp = await slack.http.get(
        slack.url("/slack/oauth_redirect"),
        params={"code": "code-x", "state": "forged"},
        headers={"Cookie": "slack-app-oauth-state=forged"},
    )
    assert resp.status == 401 and await _docs(store, "TX") == {}


async def test_the_real_core_store_is_the_installation_storage(
    start_harness: StartHarness, fake_slack: FakeSlack, make_app: Any
) -> None:
    """As `bot slack` wires it: the real BotApp, its own store passed as the storage."""
    app: BotApp = await make_app()
    slack = await _start(start_harness, app.store, app)
    await _install(slack, fake_slack, "T7", "xoxb-seven")
    installed = await _storage(app.store).get_doc("-", "T7", "bot") or {}
    assert installed.get("bot_token") == "xoxb-seven"
    ts = await slack.mention("hello", channel="C7", team="T7", bot_user="UBT7")
    await slack.wait_done(ts, timeout=10)
    assert slack.replies("C7", thread_ts=ts) == ["ok: hello"]
    await slack.send_event({"type": "app_uninstalled"}, team="T7")
    await _eventually(lambda: _missing(app.store, "T7", "bot"))
    assert await _storage(app.store).delete_docs("-", "T7") == 0
