"""A place's policy: how the bot behaves in one channel, resolved once per turn.

Why one value: the system text, the model, the tools offered and whether memory is used in a
place must be decided in one place and read by everyone else (the context builder, the model
client, the toolbox, the memory), so a channel's setting is a boundary the whole turn keeps, not
a line of prompt one part forgets. Resolution is layered: the deployment's defaults, then the
team's settings, then the channel's (`resolve`), each key remembering where its value came from
(`/config show` says it). Where the values are kept is `PlaceSettingsSource`; with none
configured every place runs on the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from bot.keys import TeamKey
from bot.usage.budgets import Budget, parse_budget

Layer = Literal["default", "team", "channel"]
REPLY_MODES = ("mention", "threads", "all")
BOT_MODES = ("ignore", "mentions")
MEMORY_MODES = ("on", "off")
APPROVE_MODES = ("writes", "all", "none")  # which tool calls wait for the person (DESIGN)
RISKS = ("read", "write")
MAX_RISK_OVERRIDES = 50
INSTRUCTIONS_MAX = 2000  # characters (DESIGN: `instructions`)

# The keys a place's policy holds, in the order `/config show` lists them.
KEYS = (
    "instructions", "model", "tools", "reply", "bots", "language", "memory", "budget",
    "person_budget", "lean_model", "approve", "tool_risk",
)  # fmt: skip
BUDGET_KEYS = ("budget", "person_budget")


@dataclass(frozen=True, slots=True)
class ScopedBudget:
    """A budget and where it was set: every one that applies is enforced (a channel's budget
    does not lift the team's). `budget` counts the team (set for the team) or the channel;
    `person_budget` counts each person in the team or in the channel."""

    key: str  # "budget" | "person_budget"
    layer: Layer  # "team" | "channel"
    budget: Budget


@dataclass(frozen=True, slots=True)
class PlacePolicy:
    """The effective settings of one place. Values are already validated (`resolve`)."""

    instructions: str = ""  # standing instructions given after the bot's own system text
    model: str = ""  # "" = the deployment's model (BOT_MODEL)
    # None = every installed pack; else the pack names allowed (the built-in `remember` follows
    # `memory`, not this).
    tools: frozenset[str] | None = None
    reply: str = "threads"
    bots: str = "ignore"
    language: str = "auto"
    memory: bool = True
    budgets: tuple[ScopedBudget, ...] = ()
    lean_model: str = ""  # the model of lean turns (a budget at 80 %); "" = the place's model
    approve: str = "writes"  # which tool calls wait for the person's approval (APPROVE_MODES)
    # An admin's risk per tool (`tool_risk=NAME=read|write,...`), over the pack's or server's.
    tool_risk: tuple[tuple[str, str], ...] = ()
    sources: Mapping[str, Layer] = field(default_factory=dict)  # key -> where it came from

    def source(self, key: str) -> Layer:
        return self.sources.get(key, "default")

    def allows_pack(self, pack: str) -> bool:
        """Whether the tools of this installed pack may be offered here (a hard boundary)."""
        return self.tools is None or pack in self.tools

    def risk_override(self, tool: str) -> str | None:
        """The admin's risk for this tool here ("read" or "write"), or None: the declared one."""
        return next((risk for name, risk in self.tool_risk if name == tool), None)

    def place_note(self) -> str:
        """What the model is told about this place after the bot's own system text: "" when
        nothing is set, so every unconfigured place sends the same (cacheable) prefix."""
        parts: list[str] = []
        if self.language != "auto":
            parts.append(f"Always answer in this language: {self.language}.")
        if self.instructions:
            parts.append(
                "Standing instructions for this place, from its admins:\n" + self.instructions
            )
        return "\n\n".join(parts)


DEFAULT_POLICY = PlacePolicy()
DEFAULT_POLICY_APPROVE = DEFAULT_POLICY.approve


class PlaceSettingsSource(Protocol):
    """Where teams' and channels' settings are kept (raw `key -> value` strings)."""

    async def place_values(
        self, team: TeamKey, channel: str
    ) -> tuple[Mapping[str, str], Mapping[str, str]]:
        """The team's values and the channel's values (either may be empty)."""
        ...


class NoPlaceSettings:
    """No settings kept anywhere: every place runs on the deployment's defaults."""

    async def place_values(
        self, team: TeamKey, channel: str
    ) -> tuple[Mapping[str, str], Mapping[str, str]]:
        return {}, {}


def parse_value(key: str, raw: str, *, models: frozenset[str]) -> object:
    """One setting's value checked and parsed; ValueError names the allowed values."""
    value = raw.strip()
    if key == "instructions":
        if len(value) > INSTRUCTIONS_MAX:
            raise ValueError(f"instructions: at most {INSTRUCTIONS_MAX:,} characters")
        return value
    if key in ("model", "lean_model"):
        if value not in models:
            raise ValueError(f"{key}: one of {', '.join(sorted(models))}")
        return value
    if key == "tools":
        if value in {"all", ""}:
            return None
        if value == "none":
            return frozenset()
        names = frozenset(n.strip() for n in value.split(",") if n.strip())
        if not names:
            raise ValueError("tools: all, none, or a comma list of installed pack names")
        return names
    if key == "reply":
        return _one_of(key, value, REPLY_MODES)
    if key == "bots":
        return _one_of(key, value, BOT_MODES)
    if key == "language":
        if value != "auto" and not _is_language_tag(value):
            raise ValueError("language: auto or a language tag such as de, ja or pt-BR")
        return value
    if key == "memory":
        return _one_of(key, value, MEMORY_MODES) == "on"
    if key == "approve":
        return _one_of(key, value, APPROVE_MODES)
    if key == "tool_risk":
        return parse_tool_risk(value)
    if key in BUDGET_KEYS:
        try:
            return parse_budget(value)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    raise ValueError(f"unknown setting {key!r}: one of {', '.join(KEYS)}")


def parse_tool_risk(value: str) -> tuple[tuple[str, str], ...]:
    """`crm_search=read,crm_close=write` -> sorted (tool, risk) pairs; "" or `none` -> ()."""
    if value in {"", "none"}:
        return ()
    pairs: dict[str, str] = {}
    for part in value.split(","):
        name, eq, risk = part.strip().partition("=")
        name, risk = name.strip(), risk.strip().casefold()
        if not eq or not name or risk not in RISKS or len(name) > 64:
            raise ValueError("tool_risk: a comma list of TOOL=read or TOOL=write, or none")
        pairs[name] = risk
    if len(pairs) > MAX_RISK_OVERRIDES:
        raise ValueError(f"tool_risk: at most {MAX_RISK_OVERRIDES} tools")
    return tuple(sorted(pairs.items()))


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{key}: one of {', '.join(allowed)}")
    return value


def _is_language_tag(value: str) -> bool:
    """BCP 47's common shape: a 2-3 letter language, then optional 2-8 character subtags."""
    parts = value.split("-")
    head, rest = parts[0], parts[1:]
    return (
        2 <= len(head) <= 3
        and head.isascii()
        and head.isalpha()
        and all(1 <= len(p) <= 8 and p.isascii() and p.isalnum() for p in rest)
    )


def resolve(
    team: Mapping[str, str],
    channel: Mapping[str, str],
    *,
    models: frozenset[str],
    default_model: str,
) -> PlacePolicy:
    """Defaults <- team <- channel. A stored value that no longer parses (a model taken out of
    `BOT_MODELS` since it was set) falls back to the layer below, never fails the turn."""
    values: dict[str, object] = {}
    sources: dict[str, Layer] = {}
    budgets: list[ScopedBudget] = []
    layers: tuple[tuple[Layer, Mapping[str, str]], ...] = (("team", team), ("channel", channel))
    for layer, raw in layers:
        for key, text in raw.items():
            if key not in KEYS:
                continue
            try:
                values[key] = parse_value(key, text, models=models)
            except ValueError:
                continue
            sources[key] = layer
            if key in BUDGET_KEYS:
                budgets.append(ScopedBudget(key, layer, values.pop(key)))  # type: ignore[arg-type]
    model = str(values.get("model", ""))
    tools = values.get("tools")
    risks = values.get("tool_risk", ())
    return PlacePolicy(
        instructions=str(values.get("instructions", "")),
        model="" if model == default_model else model,
        lean_model=str(values.get("lean_model", "")),
        tools=tools if isinstance(tools, frozenset) else None,
        reply=str(values.get("reply", DEFAULT_POLICY.reply)),
        bots=str(values.get("bots", DEFAULT_POLICY.bots)),
        language=str(values.get("language", DEFAULT_POLICY.language)),
        memory=bool(values.get("memory", True)),
        approve=str(values.get("approve", DEFAULT_POLICY_APPROVE)),
        tool_risk=risks if isinstance(risks, tuple) else (),
        budgets=tuple(budgets),
        sources=sources,
    )


class PolicyResolver:
    """Resolves a place's policy for a turn from the defaults and the settings source."""

    def __init__(
        self,
        source: PlaceSettingsSource,
        *,
        default_model: str,
        models: frozenset[str] = frozenset(),
    ) -> None:
        self.source = source
        self.default_model = default_model
        self.models = models | {default_model}

    async def for_place(self, team: TeamKey, channel: str) -> PlacePolicy:
        team_values, channel_values = await self.source.place_values(team, channel)
        if not team_values and not channel_values:
            return DEFAULT_POLICY
        return resolve(
            team_values, channel_values, models=self.models, default_model=self.default_model
        )
