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
