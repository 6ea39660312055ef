"""One consolidation step's model call: a stretch of a session's messages in, fact candidates and
episodic memories out, checked so only a person's own words become their facts.

What the model sees: people's messages and the bot's final replies (for context), tool results
marked as tool data, never the bot's tool-call requests, never personal `remember` turns (those
facts are stored already), and never text recalled from memory (stripped: see
`bot.memory.tags`). What is kept of its answer: a fact only when it names a message of that very
person (a user message, or a tool result in that person's turn for `tool` facts); a memory only
with message ids from the stretch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from bot.audience import META_AUDIENCE, PUBLIC, UNKNOWN_FACT, Audience, narrowest
from bot.memory.episodic.excerpts import META_PRIVATE_PLACE, said_at
from bot.memory.fact_prompts import EXTRACT_SCHEMA, EXTRACT_SYSTEM, EXTRACT_TASK
from bot.memory.render import compact_tool_result, group_turns, is_private_turn
from bot.memory.structured import JsonAsker
from bot.memory.tags import strip_recalled
from bot.stores.records import (
    FactSource,
    PendingConsolidation,
    PendingFact,
    PendingMemory,
    StoredMessage,
)

MAX_MESSAGE_CHARS = 1500
MAX_FACT_CHARS = 500
MAX_MEMORY_CHARS = 1000
MAX_ITEMS = 50


def ref(message: StoredMessage) -> str:
    return f"{message.session}#{message.seq}"


@dataclass
class Extracted:
    pending: PendingConsolidation
    dropped: int  # candidates the checks refused (counted as REJECT)


def transcript(messages: list[StoredMessage]) -> list[dict[str, str]]:
    lines: list[dict[str, str]] = []
    for group in group_turns(messages):
        if is_private_turn(group):
            continue
        for m in group:
            if m.role == "assistant" and (m.tool_calls or not m.content):
                continue
            text = strip_recalled(m.content)
            if m.role == "tool":
                text = compact_tool_result(text)
            if not text.strip():
                continue
            lines.append(
                {
                    "id": ref(m),
                    "role": m.role,
                    "person": m.speaker if m.role != "assistant" else "assistant",
                    "date": f"{m.created_at:%Y-%m-%d}",
                    "text": text[:MAX_MESSAGE_CHARS],
                }
            )
    return lines


async def extract(
    asker: JsonAsker, messages: list[StoredMessage], *, upto_seq: int, erasures: int
) -> Extracted:
    lines = transcript(messages)
    pending = PendingConsolidation(upto_seq=upto_seq, erasures=erasures)
    if not lines:
        return Extracted(pending, 0)
    request = [
        {"role": "system", "content": EXTRACT_SYSTEM},
        {"role": "user", "content": json.dumps({"messages": lines}, ensure_ascii=False)},
    ]
    answer = await asker.ask(request, EXTRACT_TASK, EXTRACT_SCHEMA)
    pending.tokens = answer.tokens
    by_id = {line["id"]: line for line in lines}
    written_at = {ref(m): m.created_at for m in messages}
    dropped = 0
    raw_facts = answer.data.get("facts")
    for item in (raw_facts if isinstance(raw_facts, list) else [])[:MAX_ITEMS]:
        fact = _checked_fact(item, by_id)
        if fact is None:
            dropped += 1
        else:
            fact.said_at = written_at.get(fact.message)
            pending.facts.append(fact)
    raw_memories = answer.data.get("memories")
    by_ref = {ref(m): m for m in messages}
    for item in (raw_memories if isinstance(raw_memories, list) else [])[:MAX_ITEMS]:
        memory = _checked_memory(item, by_id)
        if memory is not None:
            sources = [by_ref[i] for i in memory.messages if i in by_ref]
            # Whose words it holds: everyone whose turn a cited message belongs to (the bot's
            # reply is the asker's turn), so a memory always has people to show and erase it.
            memory.people = sorted({m.speaker for m in sources if m.speaker})
            if not memory.people:
                continue
            memory.audience = narrowest(message_audience(m, messages) for m in sources)
            memory.private = not Audience.parse(memory.audience).public
            memory.occurred_at = min((said_at(m) for m in sources), default=None)
            pending.memories.append(memory)
    return Extracted(pending, dropped)


def _checked_fact(item: object, by_id: dict[str, dict[str, str]]) -> PendingFact | None:
    if not isinstance(item, dict):
        return None
    text = " ".join(str(item.get("text") or "").split())
    person = str(item.get("person") or "")
    said = str(item.get("source") or "inferred")
    source: FactSource = "user" if said == "user" else "tool" if said == "tool" else "inferred"
    line = by_id.get(str(item.get("message") or ""))
    if not text or len(text) > MAX_FACT_CHARS or line is None or line["person"] != person:
        return None  # not from a message of this person: the bot's words, or invented
    if (line["role"] == "tool") != (source == "tool"):
        return None  # tool data is only ever a `tool` fact, and a `tool` fact only tool data
    key = " ".join(str(item.get("key") or "").split()) or None
    return PendingFact(person=person, text=text, key=key, source=source, message=line["id"])


def message_audience(message: StoredMessage, session: Sequence[StoredMessage]) -> str:
    """A stored message's audience id: its own (`meta.audience`, written since the audience
    rule), else, for older messages, the place's as its messages tell it: a private flag on
    any of them makes it private, an unknown one the narrowest; a place whose messages say
    nothing of privacy was public."""
    own = message.meta.get(META_AUDIENCE)
    if isinstance(own, str) and own:
        return own
    for other in session:
        known = other.meta.get(META_AUDIENCE)
        if isinstance(known, str) and known:
            return known
    if any(bool(m.meta.get(META_PRIVATE_PLACE)) for m in session):
        return UNKNOWN_FACT  # a private channel or a DM, which the old flag did not tell apart
    return PUBLIC


def _checked_memory(item: object, by_id: dict[str, dict[str, str]]) -> PendingMemory | None:
    if not isinstance(item, dict):
        return None
    text = " ".join(str(item.get("text") or "").split())[:MAX_MEMORY_CHARS]
    raw = item.get("messages")
    ids = [str(i) for i in (raw if isinstance(raw, list) else []) if str(i) in by_id]
    if not text or not ids:
        return None
    people = sorted({by_id[i]["person"] for i in ids if by_id[i]["role"] == "user"})
    return PendingMemory(text=text, messages=ids, people=people)
