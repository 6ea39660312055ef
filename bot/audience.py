"""The audience rule (DESIGN, conversation behaviour): who could read what the bot remembers.

A reply is read by everyone in its place, so what enters its context must have been visible to
all of them. Everything remembered carries the audience it came from:
- `public`: the public channels of one team (anyone in the team could read it);
- `private:<place>`: one private channel or group DM (its members);
- `dm:<place>`: one person's DM with the bot.

The id is a plain string so stores filter on it in their queries (`audience IN (...)`), before
anything is ranked. A record drawn from several messages takes the narrowest of their
audiences (`narrowest`); a record whose audience is unknown (written before this rule) is
treated as the narrowest there is for it (`UNKNOWN_FACT`: the person's DMs only).

Which facts a place may use (`fact_audiences_for`): in the person's own DM, all of theirs (the
reply is read by them alone); in a private place, the public ones and that place's; in a public
channel, the public ones only. Memories of conversations (they hold other people's words) stay
in their place unless public: see `bot.memory.episodic.service.scope_for`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

AudienceKind = Literal["public", "private", "dm"]
_RANK: dict[str, int] = {"public": 0, "private": 1, "dm": 2}

PUBLIC = "public"
# A fact stored before facts carried an audience: usable in the person's DMs only.
UNKNOWN_FACT = "dm:?"
# Key of a stored message's `meta` holding its audience id (user, assistant and tool messages).
META_AUDIENCE = "audience"


@dataclass(frozen=True, slots=True)
class Audience:
    kind: AudienceKind
    place: str = ""  # platform:team:channel; empty for `public`

    def __post_init__(self) -> None:
        if self.kind not in _RANK:
            raise ValueError(f"not an audience kind: {self.kind!r}")
        if self.kind != "public" and not self.place:
            raise ValueError(f"a {self.kind} audience needs its place")

    @property
    def id(self) -> str:
        return PUBLIC if self.kind == "public" else f"{self.kind}:{self.place}"

    @property
    def public(self) -> bool:
        return self.kind == "public"

    @classmethod
    def parse(cls, audience_id: str | None) -> Audience:
        """The audience of a stored id; an unknown or missing id is the narrowest (a DM of
        nobody's place: usable only where every audience is, the person's own DM)."""
        if audience_id == PUBLIC:
            return cls("public")
        kind, _, place = (audience_id or "").partition(":")
        if kind in ("private", "dm") and place:
            return cls(kind, place)  # type: ignore[arg-type]
        return cls("dm", "?")

    @classmethod
    def of_place(
        cls, platform: str, team: str, channel: str, *, is_dm: bool, is_private: bool
    ) -> Audience:
        place = f"{platform}:{team}:{channel}"
        if is_dm:
            return cls("dm", place)
        if is_private:
            return cls("private", place)
        return cls("public")


def narrowest(audiences: Iterable[str | None]) -> str:
    """The narrowest of several audience ids (unknown ones count as the narrowest of all);
    `public` for none."""
    best: Audience | None = None
    for raw in audiences:
        audience = Audience.parse(raw)
        if best is None or _RANK[audience.kind] > _RANK[best.kind]:
            best = audience
    return best.id if best is not None else PUBLIC


def fact_audiences_for(reading: Audience) -> tuple[str, ...] | None:
    """The fact audiences a reply in `reading` may use; None: all (the person's own DM)."""
    if reading.kind == "dm":
        return None
    if reading.kind == "private":
        return (PUBLIC, reading.id)
    return (PUBLIC,)
