"""What the core may know about a platform, as data each adapter hands in.

The core names no platform: each adapter describes its own (`adapters/<name>/traits.py`), the
composition root `adapters.platforms` lists them and registers them at start-up (the CLI, each
adapter's runtime, the tests), and the core reads them here by the platform part of a key. A
platform nobody registered (the console, a test's "test") gets neutral traits. The core never
imports adapters: this module only holds what it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# The team of a DM that has none, on a platform with `dm_scope` (the person's DM scope).
DM_SCOPE = "@dm"


def _never() -> bool:
    return False


def _no_time(message_id: str) -> float | None:
    return None


@dataclass(frozen=True)
class PlatformTraits:
    """One platform's rules the core applies (the adapter's own settings stay in the adapter)."""

    name: str  # the platform part of person, team and session keys
    display_name: str = ""  # as people read it; "" means `name` capitalised
    team_word: str = "team"  # what the platform calls a team ("workspace", "server")
    # DMs have no team: the adapter puts them in the person's DM scope (`DM_SCOPE`), where all
    # of the person's facts on the platform may be used.
    dm_scope: bool = False
    # A channel id starting with this is a DM by its very id ("" for none).
    dm_channel_prefix: str = ""
    # The adapter flagged private places on messages stored before audiences were recorded;
    # False: such an old message says nothing, so it counts as the narrowest audience.
    flagged_private_places: bool = True
    # The durable inbox kinds the adapter writes (`bot doctor` reports their depth).
    inbox_kinds: tuple[str, ...] = ()
    # When a message id was made (Unix seconds), or None when the id does not say.
    message_time: Callable[[str], float | None] = _no_time
    # Library loggers quieted to WARNING (their INFO lines are per request).
    library_loggers: tuple[str, ...] = ()
    # The `bot <name>` command: its help line and the module whose `main(settings)` runs it.
    cli_help: str = ""
    main_module: str = ""
    runs_workers: bool = False  # `bot <name> --workers N`: its start-up can supervise workers
    person_example: str = ""  # a person key as `bot memory audit --user` takes it
    # Whether it is configured, and whether several teams' admins can install tool packs
    # (their admins are not the operator, so pack URLs reach public addresses only).
    configured: Callable[[], bool] = _never
    multi_tenant: Callable[[], bool] = _never

    @property
    def title(self) -> str:
        return self.display_name or self.name.capitalize()


_REGISTRY: dict[str, PlatformTraits] = {}


def register(*traits: PlatformTraits) -> None:
    """Make these platforms known to the core (idempotent; a later one replaces its name)."""
    for one in traits:
        _REGISTRY[one.name] = one


def traits_of(platform: str) -> PlatformTraits:
    """The registered traits of `platform`, or neutral ones for a platform nobody described."""
    found = _REGISTRY.get(platform)
    return found if found is not None else PlatformTraits(name=platform)


def registered() -> tuple[PlatformTraits, ...]:
    return tuple(_REGISTRY.values())


def inbox_kinds() -> tuple[str, ...]:
    return tuple(kind for one in _REGISTRY.values() for kind in one.inbox_kinds)


def library_loggers() -> tuple[str, ...]:
    return tuple(name for one in _REGISTRY.values() for name in one.library_loggers)


def multi_tenant() -> bool:
    """Several teams can install packs here (some registered platform says so)."""
    return any(one.multi_tenant() for one in _REGISTRY.values())
