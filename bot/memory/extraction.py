"""One consolidation step's model call: a stretch of a session's messages in, fact candidates and
episodic memories out, checked so only a person's own words become their facts.

What the model sees: people's messages and the bot's final replies (for context), tool results
marked as tool data, never the bot's tool-call requests, never personal `remember` turns (those
facts are stored already), and never text recalled from memory (stripped: see
`bot.memory.tags`). What is kept of its answer: a fact only when it names a message of that very
person (a user message, or a tool result in that person's turn for `tool` facts: never the bot's
reply nor anyone else's words) and its words are found there (`bot.memory.fact_support`: a bot
reply relaying someone else's claim, filed under the person's adjacent message, is not their
fact); a memory only with message ids from the stretch.

A kept fact is dated when its message was said (`said_at`: the platform's time, which `bot chat
--at` sets) and carries the audience of its message (`fact_common.message_audience`; a tool
result written before messages carried one takes its turn's user message's), so it is only used
where everyone reading could have read that message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bot.audience import META_AUDIENCE, UNKNOWN_FACT, Audience, narrowest
from bot.memory.episodic.excerpts import said_at
from bot.memory.fact_prompts import EXTRACT_SCHEMA, EXTRACT_SYSTEM, EXTRACT_TASK
from bot.memory.fact_support import supported
from bot.memory.render import compact_tool_result, group_turns, is_private_turn
from bot.memory.structured import JsonAsker
from bot.memory.tags import strip_recalled
from bot.stores.fact_common import message_audience, message_audience_in
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
    stored = {ref(m): m for m in messages}
    dropped = 0
    raw_facts = answer.data.get("facts")
    for item in (raw_facts if isinstance(raw_facts, list) else [])[:MAX_ITEMS]:
        fact = _checked_fact(item, by_id)
        cited = [stored[fact.message]] if fact is not None and fact.message in stored else []
        if fact is None or not cited or not _theirs(fact, cited, by_id):
            dropped += 1
        else:
            fact.said_at = max(said_at(m) for m in cited)
            fact.audience = _narrowest_of(cited, messages)
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
            memory.audience = narrowest(message_audience_in(m, messages) for m in sources)
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
    if not text or len(text) > MAX_FACT_CHARS or line is None or not person:
        return None  # empty, too long, or citing no message of the stretch (invented)
    key = " ".join(str(item.get("key") or "").split()) or None
    return PendingFact(person=person, text=text, key=key, source=source, message=line["id"])


def _theirs(
    fact: PendingFact, cited: list[StoredMessage], by_id: dict[str, dict[str, str]]
) -> bool:
    """Every cited message is the fact's subject's own: their words (a user message they
    sent), or for a `tool` fact tool data of their turn (tool data is only ever a `tool` fact);
    never the bot's reply, nor anyone else's message. And the fact is found in their words
    there (`bot.memory.fact_support`)."""
    for m in cited:
        if m.speaker != fact.person or m.role == "assistant":
            return False  # someone else's words, or the bot's (even in this person's turn)
        if (m.role == "tool") != (fact.source == "tool"):
            return False
    texts = [by_id[ref(m)]["text"] for m in cited if ref(m) in by_id]
    names = [n for m in cited if m.role == "user" and (n := m.name)]
    names.append(fact.person.rsplit(":", 1)[-1])
    return len(texts) == len(cited) and supported(fact.text, texts, names=names)


def _narrowest_of(cited: list[StoredMessage], messages: list[StoredMessage]) -> str:
    """The narrowest audience of the cited messages. A tool result written before messages
    carried their audience (only the person's own message flagged a private place) takes its
    turn's user message's; when that is not in the stretch, a DM of its place (the narrowest)."""
    audiences: list[str] = []
    for m in cited:
        if m.role == "user" or META_AUDIENCE in m.meta:
            audiences.append(message_audience(m.session, m.meta))
            continue
        asked = next((u for u in messages if u.turn_id == m.turn_id and u.role == "user"), None)
        if asked is not None:
            audiences.append(message_audience(asked.session, asked.meta))
        else:
            place = m.session.rsplit(":", 1)[0]
            audiences.append(Audience("dm", place).id if place else UNKNOWN_FACT)
    return narrowest(audiences)


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
