"""Prompts and JSON schemas of the fact model calls (reconciliation, extraction). Text recalled
from memory into a conversation is wrapped in RECALL tags (see `bot.memory.tags`): the prompts
say never to take facts from it, and the transcript builder strips it anyway."""

from __future__ import annotations

from typing import Any

RECONCILE_TASK = "fact_reconcile"

RECONCILE_SYSTEM = """\
[task: fact_reconcile]
You keep a person's long-term facts consistent. You get one NEW candidate fact and the \
person's EXISTING live facts (id, subject key, text, source). Decide one event:
- ADD: a new durable fact about the person, on a subject none of the existing facts covers.
- UPDATE: it supersedes an existing fact on the SAME subject (e.g. "is vegetarian" -> "now \
eats fish"): give that fact's id as target_id and the merged, current fact as text.
- DELETE: it says an existing fact on the same subject is no longer true and gives no \
replacement: give its id as target_id.
- NOOP: an existing fact already says the same thing (give its id as target_id).
- REJECT: not a durable fact about the person: a greeting, a question, a passing state \
("tired today"), a guess, or something about someone else.
Never UPDATE or DELETE a fact on another subject. Give the subject as a short snake_case key \
(diet, allergy, home_city, preferred_units, job, ...). Keep the person's language. Reply as JSON.\
"""

RECONCILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": ["ADD", "UPDATE", "DELETE", "NOOP", "REJECT"]},
        "target_id": {"type": "string"},
        "key": {"type": "string"},
        "text": {"type": "string"},
        "reason": {"type": "string"},
    },
    "required": ["event", "target_id", "key", "text", "reason"],
    "additionalProperties": False,
}

EXTRACT_TASK = "memory_extraction"

EXTRACT_SYSTEM = """\
[task: memory_extraction]
You turn one stretch of a team chat into long-term memory. You get the messages as JSON (id, \
role, person, date, text). Return:
- facts: durable facts about a PERSON, each taken from that person's OWN message (role "user"; \
give its id as message and that message's person as person): preferences, allergies, diet, \
where they live, their job, standing instructions. source is "user" when they said it, \
"inferred" when you deduce it from what they said, "tool" when it comes from tool data in \
their turn. Word each fact with the person's own words from that message (a fact whose \
words are not in it is dropped). Never take a fact from the assistant's messages (nor what \
the assistant says someone else said), never from text inside <recalled-memory> tags (it is \
already remembered), never greetings, questions, passing states ("tired today") or guesses. \
key: a short snake_case subject (diet, allergy, home_city).
- memories: a few short, self-contained notes of what happened or was decided (with dates), \
each with the ids of the messages it draws on.
Reply as JSON.\
"""

EXTRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "person": {"type": "string"},
                    "text": {"type": "string"},
                    "key": {"type": "string"},
                    "source": {"type": "string", "enum": ["user", "inferred", "tool"]},
                    "message": {"type": "string"},
                },
                "required": ["person", "text", "key", "source", "message"],
                "additionalProperties": False,
            },
        },
        "memories": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "messages": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["text", "messages"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["facts", "memories"],
    "additionalProperties": False,
}
