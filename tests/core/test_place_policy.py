"""A place's policy (`bot.policy`): resolved defaults <- team <- channel, and read by the turn
as one input: what FakeOpenAI receives (system text, model name, tools) and what is stored
show each key taking effect, not the policy object itself."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from bot.keys import TeamKey
from bot.memory.prompts import SYSTEM_PROMPT
from bot.policy import PolicyResolver, parse_value, resolve
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.helpers import message, say

MODELS = frozenset({"gpt-4o-mini", "big-model"})


class Places:
    """Settings kept in a dict (the `/config` store's stand-in for these tests)."""

    def __init__(self) -> None:
        self.team: dict[str, dict[str, str]] = {}
        self.channel: dict[tuple[str, str], dict[str, str]] = {}

    async def place_values(
        self, team: TeamKey, channel: str
    ) -> tuple[Mapping[str, str], Mapping[str, str]]:
        return self.team.get(team.id, {}), self.channel.get((team.id, channel), {})


def test_channel_wins_over_team_and_team_over_default() -> None:
    policy = resolve(
        {"reply": "all", "language": "de", "memory": "off"},
        {"reply": "mention"},
        models=MODELS,
        default_model="gpt-4o-mini",
    )
    assert (policy.reply, policy.language, policy.memory) == ("mention", "de", False)
    assert policy.source("reply") == "channel"
    assert policy.source("language") == "team"
    assert policy.source("bots") == "default" and policy.bots == "ignore"


def test_a_stored_value_that_no_longer_parses_falls_back_to_the_layer_below() -> None:
    policy = resolve(
        {"model": "big-model"},
        {"model": "retired-model", "colour": "blue"},
        models=MODELS,
        default_model="gpt-4o-mini",
    )
    assert policy.model == "big-model" and policy.source("model") == "team"


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("reply", "sometimes", "mention, threads, all"),
        ("model", "gpt-9", "big-model, gpt-4o-mini"),
        ("memory", "maybe", "on, off"),
        ("language", "klingon!", "language tag"),
        ("instructions", "x" * 2001, "2,000"),
        ("colour", "blue", "instructions, model, tools"),
    ],
)
def test_bad_values_are_refused_naming_what_is_allowed(key: str, value: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_value(key, value, models=MODELS)


def test_tools_setting_parses_all_none_and_packs() -> None:
    assert parse_value("tools", "all", models=MODELS) is None
    assert parse_value("tools", "none", models=MODELS) == frozenset()
    assert parse_value("tools", "weather, orders", models=MODELS) == {"weather", "orders"}


async def _with_places(make_app: Any, places: Places, **overrides: Any) -> Any:
    app = await make_app(bot_models="big-model", **overrides)
    app.policies = PolicyResolver(
        places, default_model=app.settings.bot_model, models=app.settings.allowed_models()
    )
    return app


async def test_instructions_language_and_model_reach_the_request(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    places = Places()
    places.team["test:T1"] = {"language": "de", "model": "big-model"}
    places.channel[("test:T1", "C2")] = {"instructions": "You are the support desk of Acme."}
    app = await _with_places(make_app, places)
    fake_openai.push(text("one"), text("two"), text("three"))

    await say(app, "hello", channel="C2")
    here = fake_openai.requests[-1]
    system = here["messages"][0]["content"]
    assert "You are the support desk of Acme." in system and "language: de" in system
    assert here["model"] == "big-model"

    await say(app, "hello", channel="C3")  # the team's settings only
    there = fake_openai.requests[-1]
    assert "Acme" not in there["messages"][0]["content"]
    assert "language: de" in there["messages"][0]["content"]

    places.team.clear()
    await say(app, "hello", channel="C3")  # defaults: the deployment's model and system text
    plain = fake_openai.requests[-1]
    assert plain["model"] == app.settings.bot_model
    assert plain["messages"][0]["content"] == SYSTEM_PROMPT


async def test_tools_is_a_boundary_not_a_hint(make_app: Any, fake_openai: FakeOpenAI) -> None:
    """`tools` bounds the team's installed packs; `remember` is memory's (the `memory` key)."""
    places = Places()
    places.channel[("test:T1", "C1")] = {"tools": "none"}
    places.channel[("test:T1", "C2")] = {"tools": "weather"}
    app = await _with_places(make_app, places)
    await app.store.install(message("x").session.team_key, "weather", {}, by="U1")
    # The model calls the weather tool anyway (as if it had seen it elsewhere): refused.
    fake_openai.push(tool_calls([("get_current_weather", {"location": "Paris"})]), text("ok"))
    await say(app, "weather in Paris?", channel="C1")
    offered = {t["function"]["name"] for t in fake_openai.requests[0].get("tools") or []}
    assert offered == {"remember"}
    result = json.loads(
        next(m for m in fake_openai.requests[1]["messages"] if m["role"] == "tool")["content"]
    )
    assert result["ok"] is False and result["error"]["type"] == "unknown_tool"

    fake_openai.push(text("ok"))
    await say(app, "weather in Paris?", channel="C2")
    offered = {t["function"]["name"] for t in fake_openai.requests[-1].get("tools") or []}
    assert {"get_current_weather", "get_weather_forecast", "remember"} <= offered


async def test_memory_off_uses_no_facts_and_offers_no_remember(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    places = Places()
    places.channel[("test:T1", "C9")] = {"memory": "off"}
    app = await _with_places(make_app, places)
    fake_openai.push(tool_calls([("remember", {"fact": "Prefers metric units."})]), text("Noted."))
    await say(app, "remember I prefer metric units", channel="C1")
    assert [f.text for f in await app.store.list_facts(message("x").person)] == [
        "Prefers metric units."
    ]

    fake_openai.push(text("hi"))
    await say(app, "what units do I like?", channel="C9")
    request = fake_openai.requests[-1]
    offered = {t["function"]["name"] for t in request.get("tools") or []}
    assert "remember" not in offered
    assert not any("metric" in str(m.get("content")) for m in request["messages"])

    fake_openai.push(text("hi"))
    await say(app, "what units do I like?", channel="C1")  # memory on elsewhere: used
    assert any("metric" in str(m.get("content")) for m in fake_openai.requests[-1]["messages"])
