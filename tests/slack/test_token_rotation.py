"""OAuth installations with token rotation: rotated shortly before they expire (issue 7, 4).

FakeSlack plays Slack's side: an install with a refresh token gets an access token that
expires, and oauth.v2.access with grant_type=refresh_token trades a refresh token once for a
new pair (a used or unknown one gets `invalid_refresh_token`). The installations are stored in
a real SQLite store, sealed with BOT_SECRET_KEY as `bot slack` wires it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import SlackConfig, SlackConfigError
from adapters.slack.installations import SealedInstallations, installation_docs
from adapters.slack.oauth import (
    MemoryInstallationStorage,
    SlackInstallationStorage,
    StorageInstallationStore,
    TokenRotation,
)
from bot import metrics
from bot.secrets import PREFIX, SecretBox
from bot.stores.sqlite import SqliteStore
from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import SlackHarness
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore

KEY = "a passphrase that is long enough"
CLIENT = ("111.222", "client-secret")
FIRST_TOKEN, FIRST_REFRESH = "xoxe.xoxb-TR-first", "xoxe-1-TR-first"


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = await SqliteStore.open(tmp_path / "data" / "bot.db")
    yield store
    await store.close()


def _rotations(outcome: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "bot_slack_token_rotations_total", {"outcome": outcome}
    )
    return value or 0.0


async def _start(start_harness: StartHarness, storage: SlackInstallationStorage) -> SlackHarness:
    return await start_harness(
        EchoCore(),
        storage=storage,
        bot_token=None,
        client_id=CLIENT[0],
        client_secret=CLIENT[1],
    )


async def _install_rotating(slack: SlackHarness, fake: FakeSlack, expires_in: int) -> None:
    """The OAuth install of an app with token rotation on, through Bolt's own flow."""
    start = await slack.http.get(slack.url("/slack/install"), allow_redirects=False)
    state = parse_qs(urlparse(start.headers["Location"]).query)["state"][0]
    fake.add_rotating_install(
        "code-TR",
        team_id="TR",
        bot_token=FIRST_TOKEN,
        refresh_token=FIRST_REFRESH,
        expires_in=expires_in,
        bot_user_id="UBTR",
    )
    done = await slack.http.get(
        slack.url("/slack/oauth_redirect"),
        params={"code": "code-TR", "state": state},
        headers={"Cookie": f"slack-app-oauth-state={state}"},
    )
    assert done.status == 200, await done.text()


def _refresh_calls(fake: FakeSlack) -> list[Any]:
    return [c for c in fake.calls_to("oauth.v2.access") if c.args.get("grant_type")]


async def test_an_expiring_installation_is_rotated_once_and_its_new_token_answers(
    start_harness: StartHarness, fake_slack: FakeSlack, sqlite: SqliteStore
) -> None:
    fake_slack.oauth_client = CLIENT  # a refresh must carry the app's credentials
    storage = SealedInstallations(installation_docs(sqlite), SecretBox(KEY))
    slack = await _start(start_harness, storage)
    await _install_rotating(slack, fake_slack, expires_in=300)  # within 15 minutes of expiry
    before = _rotations("rotated")

    # Several events at once: one rotation, all answered with the new token.
    channels = [f"CR{n}" for n in range(4)]
    stamps = await asyncio.gather(
        *(slack.mention(f"hi {c}", channel=c, team="TR", bot_user="UBTR") for c in channels)
    )
    for channel, ts in zip(channels, stamps, strict=True):
        await slack.wait_done(ts)
        assert slack.replies(channel, thread_ts=ts) == [f"echo: hi {channel}"]
    assert fake_slack.refreshes == [FIRST_REFRESH]  # traded once, not once per event
    assert len(_refresh_calls(fake_slack)) == 1
    [new_token] = [t for t in fake_slack.tokens if t.startswith("xoxe.xoxb-TR-rotated")]
    used = {c.token for c in fake_slack.calls if c.channel in channels}
    assert used == {new_token}
    assert _rotations("rotated") == before + 1

    # The stored installation holds the new pair, sealed (no token in the raw document).
    raw = await installation_docs(sqlite).get_doc("-", "TR", "bot")
    assert raw is not None and set(raw) == {"sealed"} and raw["sealed"].startswith(PREFIX)
    assert "xoxe" not in str(raw)
    opened = await storage.get_doc("-", "TR", "bot")
    assert opened is not None and opened["bot_token"] == new_token
    assert opened["bot_refresh_token"] in fake_slack.refresh_grants  # the live refresh token
    assert opened["bot_token_expires_at"] > time.time() + 11 * 3600
    installation = await (slack_store := StorageInstallationStore(storage)).async_find_installation(
        enterprise_id=None, team_id="TR"
    )
    assert installation is not None and installation.bot_token == new_token
    assert installation.bot_refresh_token == opened["bot_refresh_token"]
    assert (await slack_store.async_find_bot(enterprise_id=None, team_id="TR")) is not None

    # A fresh token is not rotated again.
    ts = await slack.mention("again", channel="CR9", team="TR", bot_user="UBTR")
    await slack.wait_done(ts)
    assert slack.replies("CR9", thread_ts=ts) == ["echo: again"]
    assert len(_refresh_calls(fake_slack)) == 1


async def test_a_token_far_from_expiry_is_not_rotated(
    start_harness: StartHarness, fake_slack: FakeSlack
) -> None:
    slack = await _start(start_harness, MemoryInstallationStorage())
    await _install_rotating(slack, fake_slack, expires_in=43200)
    ts = await slack.mention("hello", channel="CN", team="TR", bot_user="UBTR")
    await slack.wait_done(ts)
    assert slack.replies("CN", thread_ts=ts) == ["echo: hello"]
    assert _refresh_calls(fake_slack) == []
    assert {c.token for c in fake_slack.calls if c.channel == "CN"} == {FIRST_TOKEN}


async def test_a_refused_rotation_keeps_answering_with_the_valid_old_token(
    start_harness: StartHarness, fake_slack: FakeSlack
) -> None:
    slack = await _start(start_harness, MemoryInstallationStorage())
    await _install_rotating(slack, fake_slack, expires_in=300)
    fake_slack.refresh_grants.clear()  # Slack no longer knows the refresh token (revoked)
    before = _rotations("failed")
    ts = await slack.mention("still there?", channel="CF", team="TR", bot_user="UBTR")
    await slack.wait_done(ts)
    assert slack.replies("CF", thread_ts=ts) == ["echo: still there?"]
    assert {c.token for c in fake_slack.calls if c.channel == "CF"} == {FIRST_TOKEN}
    assert _rotations("failed") == before + 1
    assert len(_refresh_calls(fake_slack)) == 1  # two events (mention + message): one try


async def test_a_refresh_token_another_process_traded_first_is_not_fatal(
    fake_slack: FakeSlack,
) -> None:
    """Two processes on one storage, each with its own bot cache: the first rotates; the
    second still holds the old record, its trade is refused (refresh tokens are single-use),
    and it takes the pair the first one saved."""
    storage = MemoryInstallationStorage()
    fake_slack.add_rotating_install(
        "unused", team_id="TR", bot_token=FIRST_TOKEN, refresh_token=FIRST_REFRESH, expires_in=60
    )
    client = AsyncWebClient(base_url=fake_slack.api_url)
    stores = [StorageInstallationStore(storage) for _ in range(2)]
    rotations = [
        TokenRotation(
            s, AsyncTokenRotator(client_id=CLIENT[0], client_secret=CLIENT[1], client=client)
        )
        for s in stores
    ]
    await stores[0].async_save_bot(
        Bot(
            team_id="TR",
            bot_token=FIRST_TOKEN,
            bot_refresh_token=FIRST_REFRESH,
            bot_token_expires_in=60,
            bot_id="BBOT2",
            bot_user_id="UBTR",
            installed_at=time.time(),
        )
    )
    stale = await stores[1].async_find_bot(enterprise_id=None, team_id="TR")  # cached there
    first = await stores[0].async_find_bot(enterprise_id=None, team_id="TR")
    assert stale is not None and first is not None
    before = _rotations("rotated_elsewhere")

    rotated = await rotations[0].fresh(first)
    assert rotated is not None and rotated.bot_token != FIRST_TOKEN
    again = await rotations[1].fresh(stale)
    assert again is not None and again.bot_token == rotated.bot_token
    assert fake_slack.refreshes == [FIRST_REFRESH]
    assert len(_refresh_calls(fake_slack)) == 2  # the second was refused
    assert _rotations("rotated_elsewhere") == before + 1


def test_a_rotating_single_workspace_token_is_refused_at_start_in_one_line() -> None:
    config = SlackConfig(signing_secret="s", bot_token="xoxe.xoxb-1-abc")
    with pytest.raises(SlackConfigError, match="SLACK_BOT_TOKEN is a rotating token") as info:
        config.validate()
    assert "\n" not in str(info.value)
