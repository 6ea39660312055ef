"""Index entries written before the audience rule get their audience from their sources.

Run once per start, in the background catch-up, before anything else is indexed: for each
team, the entries without an audience are looked up in the conversation store (their source
messages, a session at a time), and each gets the narrowest audience of its sources; one whose
sources are gone (pruned by retention, erased) gets the narrowest there is, so it is used only
in its own place from then on. Only entries without an audience are read (the query filters).
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict

from bot.audience import UNKNOWN_FACT, narrowest
from bot.keys import SessionKey, TeamKey
from bot.stores.fact_common import message_audience_in
from bot.stores.memory_index import MemoryEntry, MemoryIndex
from bot.stores.protocols import ConversationStore
from bot.stores.records import StoredMessage

log = logging.getLogger(__name__)
AROUND = 20  # messages read before the first cited one


async def settle_audiences(store: ConversationStore, index: MemoryIndex) -> int:
    """Give every entry without an audience the one of its sources; returns how many."""
    teams: set[TeamKey] = set()
    for session_id in await store.session_heads():
        with contextlib.suppress(ValueError):
            teams.add(SessionKey.parse(session_id).team_key)
    settled = 0
    for team in sorted(teams, key=lambda t: t.id):
        legacy = await index.entries_of_team(team, without_audience=True)
        if legacy:
            audiences = await _audiences(store, legacy)
            settled += await index.set_audiences(team, audiences)
    if settled:
        log.info("memory_audiences_settled", extra={"fields": {"entries": settled}})
    return settled


async def _audiences(store: ConversationStore, entries: list[MemoryEntry]) -> dict[str, str]:
    wanted: dict[str, set[int]] = defaultdict(set)
    for entry in entries:
        for ref in entry.source_ids:
            session_id, _, seq = ref.rpartition("#")
            if session_id and seq.isdigit():
                wanted[session_id].add(int(seq))
    found: dict[str, StoredMessage] = {}
    around: dict[str, list[StoredMessage]] = {}
    for session_id, seqs in wanted.items():
        try:
            key = SessionKey.parse(session_id)
        except ValueError:
            continue
        # The turn before a cited bot reply holds the person's message that tells the place.
        start = max(min(seqs) - AROUND, 0)
        messages = await store.between(key, after_seq=start, upto_seq=max(seqs))
        around[session_id] = messages
        found.update({f"{m.session}#{m.seq}": m for m in messages if m.seq in seqs})
    out: dict[str, str] = {}
    for entry in entries:
        sources = [found[ref] for ref in entry.source_ids if ref in found]
        if not sources:
            out[entry.id] = UNKNOWN_FACT
            continue
        out[entry.id] = narrowest(message_audience_in(m, around[m.session]) for m in sources)
    return out
