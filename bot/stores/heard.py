"""The record of messages the bot heard where it is (`bot.memory.heard`): one protocol, two
backends (`heard_sqlite`: its own file `heard.db`; `heard_mongo`: a collection beside the
store's), chosen like the memory index (`open_heard_store`).

Bounds, whatever arrives (decided here; the README of the record is `bot.memory.heard`):
- a record's text is cut at `MAX_TEXT` characters (marked), at most `MAX_FILES` file names of
  `MAX_NAME` characters each, ids of at most `MAX_ID` characters (longer ones are refused);
- a place (a channel's top level, or one thread) keeps its newest `PER_PLACE` records;
- a reader asks for records at most `MAX_AGE` seconds older than the mention (by the platform's
  times, so a platform clock that is off does not hide them), and `prune` deletes those kept
  longer than `MAX_AGE` (by this host's clock, when they were written); the whole store keeps
  the `MAX_TOTAL` written last.

Coverage marks say since when the record holds every message of a place: a channel's (thread
"") from the first message heard there, a thread's from the moment it was fetched from the
platform. A mark keeps the earliest time given. Marks are cleared when a process starts (what
was said while no process listened is not in the record).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from bot.messages import HeardMessage

MAX_TEXT = 2_000
MAX_FILES = 10
MAX_NAME = 200
MAX_ID = 128
PER_PLACE = 200
MAX_AGE = 7 * 86400.0
MAX_TOTAL = 200_000
CUT_NOTE = "…[cut]"
HEARD_FILENAME = "heard.db"
_PART = re.compile(r"[^:\s]{1,128}")


@dataclass(frozen=True, slots=True)
class Mark:
    """Since when (`since`, Unix seconds) the record holds every message of a place."""

    platform: str
    team: str
    channel: str
    thread: str  # "" for the channel's top level
    since: float


def bounded(message: HeardMessage) -> HeardMessage | None:
    """The message within the record's bounds; None when its ids cannot be stored (a missing
    or oversized id, a ":" in one: the same rules as `bot.keys`)."""
    ids = (message.platform, message.team, message.channel, message.message_id, message.author)
    if not all(isinstance(i, str) and _PART.fullmatch(i) for i in ids):
        return None
    if message.thread and not _PART.fullmatch(message.thread):
        return None
    if not isinstance(message.text, str) or not isinstance(message.at, (int, float)):
        return None
    text = message.text
    if len(text) > MAX_TEXT:
        text = text[: MAX_TEXT - len(CUT_NOTE)] + CUT_NOTE
    files = tuple(str(f)[:MAX_NAME] for f in message.files[:MAX_FILES])
    name = message.name[:MAX_NAME] if isinstance(message.name, str) else None
    audience = str(message.audience)[: MAX_ID * 4]
    if (text, files, name, audience) == (
        message.text,
        message.files,
        message.name,
        message.audience,
    ):
        return message
    return replace(message, text=text, files=files, name=name, audience=audience)


class HeardStore(Protocol):
    async def add(self, records: Sequence[HeardMessage]) -> int:
        """Store these (already `bounded`) records, a record with the same place and message id
        replaced; each place touched is cut to its newest `PER_PLACE`. Returns how many."""

    async def mark(self, marks: Sequence[Mark]) -> None:
        """Set coverage marks, keeping the earliest `since` of a place."""

    async def since(self, platform: str, team: str, channel: str, thread: str) -> float | None:
        """The coverage mark of a place; None when there is none."""

    async def clear_marks(self) -> None: ...

    async def recent(
        self,
        platform: str,
        team: str,
        channel: str,
        thread: str,
        *,
        audiences: Sequence[str],
        before: float,
        after: float,
        limit: int,
    ) -> list[HeardMessage]:
        """The newest `limit` records of the place with an audience among `audiences` and a
        time in (after, before], oldest first (those of one instant by message id)."""

    async def find(
        self, platform: str, team: str, channel: str | None, message_ids: Sequence[str]
    ) -> list[HeardMessage]:
        """The records of these platform messages (in one channel, or anywhere in the team)."""

    async def delete(
        self, platform: str, team: str, channel: str | None, message_ids: Sequence[str]
    ) -> int: ...

    async def rewrite(self, records: Sequence[HeardMessage]) -> int:
        """Replace the text of these records (found by place and message id); how many."""

    async def by_author(self, platform: str, team: str, author: str) -> list[HeardMessage]: ...

    async def delete_author(self, platform: str, team: str, author: str) -> int: ...

    async def bot_records(
        self, platform: str, team: str, *, after: str = "", limit: int = 500
    ) -> list[HeardMessage]:
        """The team's records written by bots, in `page_key` order after `after`."""

    async def prune(self, now: float) -> int:
        """Delete the records written more than `MAX_AGE` seconds before `now`, and those past
        `MAX_TOTAL` (the earliest written first); how many went."""

    async def count(self) -> int: ...

    async def compact(self) -> None: ...

    async def close(self) -> None: ...


def page_key(record: HeardMessage) -> str:
    """The order `bot_records` pages in (unique within a team)."""
    return f"{record.channel}/{record.thread}/{record.message_id}"


async def open_heard_store(store: object, *, data_dir: Path) -> HeardStore:
    """MongoDB when the store is MongoDB (same client and database), else `heard.db` of its own
    (its own writer thread: a flush of heard messages never queues behind a turn's writes).
    `store` only says which backend runs (no method of it is called)."""
    from bot.stores.mongo import MongoStore  # keeps SQLite-only runs free of pymongo startup

    if isinstance(store, MongoStore):
        from bot.stores.heard_mongo import MongoHeardStore

        return await MongoHeardStore.open(store.client, store.db.name)
    from bot.stores.heard_sqlite import SqliteHeardStore

    return await SqliteHeardStore.open(Path(data_dir) / HEARD_FILENAME)
