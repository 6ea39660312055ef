"""Scoping keys. Every store query takes one of these, so "no key" can never mean "everything".

A key refuses empty parts (and parts containing the ":" separator) at construction: a missing
team or user id is a bug upstream, and failing loudly here is what keeps one person's data out of
another's context.
"""

from __future__ import annotations

from dataclasses import dataclass

_SEP = ":"


def _check(kind: str, **parts: str | None) -> None:
    for name, value in parts.items():
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{kind}.{name} must be a non-empty string, got {value!r}")
        if _SEP in value:
            # ids are joined with ":"; a part containing it could be parsed back wrongly
            raise ValueError(f"{kind}.{name} must not contain {_SEP!r}, got {value!r}")


@dataclass(frozen=True, slots=True)
class TeamKey:
    """A workspace (Slack team) or guild (Discord); tool installs belong here."""

    platform: str
    team: str

    def __post_init__(self) -> None:
        _check("TeamKey", platform=self.platform, team=self.team)

    @property
    def id(self) -> str:
        return _SEP.join((self.platform, self.team))


@dataclass(frozen=True, slots=True)
class PersonKey:
    """One person: platform + team/guild + user id. Long-term facts belong to a PersonKey."""

    platform: str
    team: str
    user: str

    def __post_init__(self) -> None:
        _check("PersonKey", platform=self.platform, team=self.team, user=self.user)

    @property
    def id(self) -> str:
        return _SEP.join((self.platform, self.team, self.user))

    @property
    def team_key(self) -> TeamKey:
        return TeamKey(self.platform, self.team)

    @classmethod
    def parse(cls, person_id: str) -> PersonKey:
        """The key whose `id` this is; ValueError for anything else."""
        parts = person_id.split(_SEP)
        if len(parts) != 3:
            raise ValueError(f"not a person id: {person_id!r}")
        return cls(*parts)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """One conversation place: platform + team + channel + thread (None for a DM or a channel)."""

    platform: str
    team: str
    channel: str
    thread: str | None = None

    def __post_init__(self) -> None:
        if self.thread == "-":
            raise ValueError("SessionKey.thread must not be '-' (it stands for 'no thread')")
        _check(
            "SessionKey",
            platform=self.platform,
            team=self.team,
            channel=self.channel,
            thread=self.thread,
        )

    @property
    def id(self) -> str:
        return _SEP.join((self.platform, self.team, self.channel, self.thread or "-"))

    @classmethod
    def parse(cls, session_id: str) -> SessionKey:
        """The key whose `id` this is; ValueError for anything else."""
        parts = session_id.split(_SEP)
        if len(parts) != 4:
            raise ValueError(f"not a session id: {session_id!r}")
        platform, team, channel, thread = parts
        return cls(platform, team, channel, None if thread == "-" else thread)

    @property
    def team_key(self) -> TeamKey:
        return TeamKey(self.platform, self.team)
