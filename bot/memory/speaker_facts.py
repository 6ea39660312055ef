"""Which of a person's facts a place may use (DESIGN, conversation behaviour).

A person is `platform:team:user`. Where a platform's DMs have no team (Discord), the adapter puts
them in the DM scope `DM_SCOPE`: only that person reads a reply there, so a DM may use all of
their facts on the platform (every guild and the DM scope), each marked with where it was
remembered; anywhere else, only the facts of that one team/guild. Slack DMs belong to a
workspace (their team is the workspace id), so they are not a DM scope: a Slack DM sees that
workspace's facts, as its channels do, and workspaces never share.

Within those, the audience rule (`bot.audience`) decides: a reply is read by everyone in its
place, so it uses only facts drawn from what all of them could read. In the person's own DM,
all of theirs; in a private channel, the public ones and that channel's own; in a public
channel, the public ones only. The store filters on the audience in its query.
"""

from __future__ import annotations

from bot.audience import Audience, fact_audiences_for
from bot.keys import PersonKey
from bot.platforms import DM_SCOPE as DM_SCOPE  # where it has always been imported from
from bot.platforms import traits_of
from bot.stores.ids import normalize_fact
from bot.stores.protocols import FactStore
from bot.stores.records import Fact


def has_dm_scope(platform: str) -> bool:
    """The platform's adapter files DMs under the person's DM scope (its traits say so)."""
    return traits_of(platform).dm_scope


def spans_platform(person: PersonKey) -> bool:
    """A DM scope: the person's facts of every team on the platform may be used here."""
    return person.team == DM_SCOPE


async def facts_for(
    store: FactStore, person: PersonKey, reading: Audience | None, *, history: bool = False
) -> list[Fact]:
    """The person's facts a reply read by `reading` may use (`bot.audience.fact_audiences_for`);
    None: every fact of this scope, whatever its audience (what `/memory` shows the person
    alone, and erases). A DM scope spans the platform. With a `reading`, the same text held
    for two audiences (said in two places) is given once."""
    audiences = fact_audiences_for(reading) if reading is not None else None
    if spans_platform(person):
        found = await store.list_user_facts(person, history=history, audiences=audiences)
    else:
        found = await store.list_facts(person, history=history, audiences=audiences)
    if reading is None:
        return found
    seen: set[tuple[str, str]] = set()
    out: list[Fact] = []
    for fact in found:
        same = (fact.person, normalize_fact(fact.text) if fact.live else f"~{fact.id}")
        if same not in seen:
            seen.add(same)
            out.append(fact)
    return out


def scope_name(person_id: str) -> str:
    """Where a fact was remembered, as a person reads it: "your DMs", "server 123"."""
    try:
        key = PersonKey.parse(person_id)
    except ValueError:
        return "another place"
    if key.team == DM_SCOPE:
        return "your DMs"
    return f"{team_word(key.platform)} {key.team}"


def team_word(platform: str) -> str:
    """What the platform calls a team: "server" (Discord), "workspace" (Slack)."""
    return traits_of(platform).team_word


def everywhere(person: PersonKey) -> str:
    """The whole platform as a person reads it: "Discord, in your DMs and every server"."""
    traits = traits_of(person.platform)
    return f"{traits.title}, in your DMs and every {traits.team_word}"


def remembered_elsewhere(fact: Fact, speaker: str) -> str:
    """Where a fact of another scope was remembered; empty for the speaker's own scope."""
    return "" if fact.person == speaker else scope_name(fact.person)
