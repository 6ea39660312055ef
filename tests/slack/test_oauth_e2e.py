"""Multi-workspace: /slack/install -> Slack -> /slack/oauth_redirect -> events -> uninstall."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlparse

import pytest

from adapters.slack import MemoryInstallationStorage, SlackConfigError
from adapters.slack.app import SlackRuntime
from adapters.slack.config import SlackConfig
from testkit.fakes.slack_api import FakeSlack
from testkit.slack_harness import SlackHarness
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore


async def _start(
    start_harness: StartHarness,
) -> tuple[SlackHarness, EchoCore, MemoryInstallationStorage]:
    core, storage = EchoCore(), MemoryInstallationStorage()
    slack = await start_harness(
        core,
        storage=storage,
        bot_token=None,
        client_id="111.222",
        client_secret="client-secret",
    )
    return slack, core, storage


def refused(caplog: pytest.LogCaptureFixture, team: str) -> int:
    """How many deliveries for `team` were refused at authorization (no installation found).

    Bolt authorizes inside the request, before its 200: once a delivery's response is back, this
    count says no listener will ever run for it (the positive signal for "not answered")."""
    return sum(
        1
        for r in caplog.records
        if r.msg == "slack_installation_missing" and getattr(r, "fields", {}).get("team") == team
    )


async def _install(slack: SlackHarness, fake: FakeSlack, team: str, token: str) -> None:
    start = await slack.http.get(slack.url("/slack/install"), allow_redirects=False)
    assert start.status == 302
    location = urlparse(start.headers["Location"])
    query = parse_qs(location.query)
    assert location.netloc == "slack.com" and query["client_id"] == ["111.222"]
    assert "app_mentions:read" in query["scope"][0].split(",")
    state = query["state"][0]
    cookie = start.cookies["slack-app-oauth-state"].value
    assert cookie == state
    fake.add_oauth_code(f"code-{team}", team_id=team, bot_token=token, bot_user_id=f"UB{team}")
    done = await slack.http.get(
        slack.url("/slack/oauth_redirect"),
        params={"code": f"code-{team}", "state": state},
        headers={"Cookie": f"slack-app-oauth-state={state}"},
    )
    assert done.status == 200, await done.text()


async def test_install_answer_and_uninstall_round_trip(
    start_harness: StartHarness, fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    slack, core, storage = await _start(start_harness)
    await _install(slack, fake_slack, "T2", "xoxb-team-two")
    assert {k for k in storage.docs if k[1] == "T2"} == {
        ("-", "T2", "bot"),
        ("-", "T2", "installer"),
        ("-", "T2", "installer:UINSTALLER"),
    }
    assert storage.docs[("-", "T2", "bot")]["bot_user_id"] == "UBT2"
    assert storage.states == {}  # the state was single-use

    ts = await slack.mention("hi team two", channel="C22", team="T2", bot_user="UBT2")
    await slack.wait_done(ts)
    assert slack.replies("C22", thread_ts=ts) == ["echo: hi team two"]
    assert core.messages[0].team == "T2" and core.messages[0].text == "hi team two"
    used = {c.token for c in fake_slack.calls if c.channel == "C22"}
    assert used == {"xoxb-team-two"}

    await slack.send_event({"type": "app_uninstalled"}, team="T2")
    await fake_slack.wait_for(lambda: not any(k[1] == "T2" for k in storage.docs))
    before = refused(caplog, "T2")
    await slack.mention("still there?", channel="C23", team="T2", bot_user="UBT2")
    assert refused(caplog, "T2") == before + 2  # app_mention and message: both refused
    assert slack.replies("C23") == [] and len(core.messages) == 1


async def test_events_from_a_team_that_never_installed_are_not_answered(
    start_harness: StartHarness, caplog: pytest.LogCaptureFixture
) -> None:
    slack, core, _ = await _start(start_harness)
    await slack.mention("anyone?", channel="C30", team="TNOPE")
    assert refused(caplog, "TNOPE") == 2
    assert core.messages == [] and slack.replies("C30") == []


async def test_installations_are_kept_apart_per_team(
    start_harness: StartHarness, fake_slack: FakeSlack
) -> None:
    slack, _core, storage = await _start(start_harness)
    await _install(slack, fake_slack, "TA", "xoxb-a")
    await _install(slack, fake_slack, "TB", "xoxb-b")
    a = await slack.mention("from a", channel="CA", team="TA", bot_user="UBTA")
    b = await slack.mention("from b", channel="CB", team="TB", bot_user="UBTB")
    await asyncio.gather(slack.wait_done(a), slack.wait_done(b))
    assert {c.token for c in fake_slack.calls if c.channel == "CA"} == {"xoxb-a"}
    assert {c.token for c in fake_slack.calls if c.channel == "CB"} == {"xoxb-b"}
    await slack.send_event(
        {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": ["UBTA"]}}, team="TA"
    )
    await fake_slack.wait_for(lambda: ("-", "TA", "bot") not in storage.docs)
    assert ("-", "TB", "bot") in storage.docs


async def test_callback_with_forged_state_fails(
    start_harness: StartHarness, fake_slack: FakeSlack
) -> None:
    slack, _, storage = await _start(start_harness)
    fake_slack.add_oauth_code("code-x", team_id="TX", bot_token="xoxb-x")
    resp = await slack.http.get(
        slack.url("/slack/oauth_redirect"),
        params={"code": "code-x", "state": "forged"},
        headers={"Cookie": "slack-app-oauth-state=forged"},
    )
    assert resp.status == 401 and storage.docs == {}


def test_oauth_without_storage_fails_clearly() -> None:
    config = SlackConfig(signing_secret="s", client_id="1", client_secret="2")
    with pytest.raises(SlackConfigError, match="installation storage"):
        SlackRuntime(EchoCore(), config, None)


async def test_state_store_expiry() -> None:
    storage = MemoryInstallationStorage()
    await storage.put_oauth_state("old", expires_at=1.0)
    assert await storage.consume_oauth_state("old") is False
    assert await storage.consume_oauth_state("never") is False


def test_oauth_variables_left_in_the_environment_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACK_CLIENT_ID", "1")
    monkeypatch.setenv("SLACK_CLIENT_SECRET", "2")
    config = SlackConfig(signing_secret="s", bot_token="xoxb-1")
    with pytest.raises(SlackConfigError, match="one workspace"):
        SlackRuntime(EchoCore(), config, None)
