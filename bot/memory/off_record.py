"""Messages said where a place's memory is off (`/config set memory=off`).

Each message stored there carries the mark in its `meta`, so what it says stays out of
long-term memory whatever the setting becomes later: the episodic indexer and the nightly
consolidation read past it (no index entries, no facts, no consolidated memories), and so it can
never be recalled elsewhere. The conversation itself is still kept, for its own thread. Turning
memory back on does not index the period it was off: the mark is on the messages, not the place.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.stores.records import StoredMessage

META_MEMORY = "memory"  # `meta` key; the value OFF marks a message kept out of memory
OFF = "off"


def off_meta(memory: bool) -> dict[str, str]:
    """What a message stored in a place with `memory` (on or off) adds to its `meta`."""
    return {} if memory else {META_MEMORY: OFF}


def kept_out(message: StoredMessage) -> bool:
    return message.meta.get(META_MEMORY) == OFF


def remembered(messages: Sequence[StoredMessage]) -> list[StoredMessage]:
    """The messages long-term memory may draw on: those not said where memory was off."""
    return [m for m in messages if not kept_out(m)]
