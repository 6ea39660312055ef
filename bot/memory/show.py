"""How `/memory show` words a person's facts: each with its short id, where it came from (the
person's words, tool data or an inference), since when (when it was said), the message it came
from, so the person can see why the bot knows it, and where the bot may use it (the audience
rule, `bot.audience`: the answer is shown to the person alone, so it lists every fact wherever
it is asked). History adds closed versions with their dates. In a DM scope the list spans the
platform, and a fact remembered elsewhere says where (a guild)."""

from __future__ import annotations

from collections.abc import Sequence

from bot.audience import UNKNOWN_FACT, Audience
from bot.keys import PersonKey, SessionKey
from bot.memory.speaker_facts import remembered_elsewhere, scope_name, team_word
from bot.stores.records import Fact

_SOURCE = {"user": "you said", "tool": "tool data", "inferred": "inferred"}
MAX_SHOWN = 100  # a long history is cut (newest kept) so the reply stays readable


def _where(ref: str) -> str:
    """`slack:T1:C1:-#12` as a person reads it: "in C1, message 12" (thread named if any)."""
    session_id, _, seq = ref.rpartition("#")
    try:
        key = SessionKey.parse(session_id)
    except ValueError:
        return f"in message {ref}"
    place = key.channel + (f" (thread {key.thread})" if key.thread else "")
    return f"in {place}, message {seq}" if seq.isdigit() else f"in {place}"


def _why(fact: Fact) -> str:
    source = _SOURCE.get(fact.source, fact.source)
    if fact.source_messages:
        return f"{source} {_where(fact.source_messages[-1])}"
    return source


def used_where(fact: Fact, here: str = "") -> str:
    """Where the bot may use the fact, as the person reads it (`here`: the asking person's id,
    to name another team's channels by their team)."""
    if fact.audience == UNKNOWN_FACT:
        return "used only in your DMs with me (kept from before I noted where things were said)"
    audience = Audience.parse(fact.audience)
    if audience.kind == "dm":
        return "used only in your DMs with me"
    if audience.kind == "private":
        channel = audience.place.rsplit(":", 1)[-1]
        return f"used only in the private channel {channel} and your DMs with me"
    try:
        platform = PersonKey.parse(fact.person).platform
    except ValueError:
        platform = ""
    team = f"this {team_word(platform)}" if not here or fact.person == here else None
    return f"used in any channel of {team or scope_name(fact.person)} and your DMs with me"


def _line(fact: Fact, here: str) -> str:
    key = f"[{fact.key}] " if fact.key else ""
    since = f"{fact.valid_from:%Y-%m-%d}"
    elsewhere = remembered_elsewhere(fact, here) if here else ""
    where = f" (remembered in {elsewhere})" if elsewhere else ""
    if fact.valid_to is None:
        return (
            f"• `{fact.id}` {key}{fact.text}{where} — _{_why(fact)}, since {since}; "
            f"{used_where(fact, here)}_"
        )
    how = "replaced" if fact.closed_reason == "updated" else "closed"
    then = f" by `{fact.replaced_by}`" if fact.replaced_by else ""
    return (
        f"• ~`{fact.id}`~ {key}{fact.text}{where} — _{_why(fact)}, {since} → {how}{then} "
        f"{fact.valid_to:%Y-%m-%d}_"
    )


def render_facts(
    facts: Sequence[Fact], *, history: bool = False, here: str = "", platform_wide: str = ""
) -> str:
    """`here`: the asking person's id (facts of other scopes are marked); `platform_wide`: the
    whole platform as a person reads it, when the list spans it (a DM scope)."""
    live = [f for f in facts if f.live]
    closed = [f for f in facts if not f.live]
    if not live and not closed:
        return "I don't remember anything about you yet."
    parts: list[str] = []
    if live:
        parts.append(
            f"Here is what I remember about you on {platform_wide}:"
            if platform_wide
            else "Here is what I remember about you:"
        )
        parts.extend(_line(f, here) for f in live[-MAX_SHOWN:])
    else:
        parts.append("I hold no current facts about you.")
    if history:
        if closed:
            parts.append("Replaced or closed earlier:")
            parts.extend(_line(f, here) for f in closed[-MAX_SHOWN:])
        else:
            parts.append("Nothing was replaced or closed.")
    parts.append(
        "Erase one with `/memory forget <id>`, or everything with `/memory forget all`."
        + ("" if history else " `/memory show history` adds what was replaced.")
    )
    return "\n".join(parts)
