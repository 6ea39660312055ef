"""The built-in `remember` tool, always offered: stores a fact for the speaker.

The speaker comes from the ToolContext the turn built (platform + team + user), never from the
model's arguments, so the model cannot file a fact under someone else.

It is not declared `write=True`: storing is idempotent in the store itself (the same text for the
same person returns the fact already stored), and the executor's replay cache would go stale
after `/memory forget` (asking to remember the same thing again must store it again).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bot.keys import PersonKey, SessionKey
from bot.stores.ids import normalize_fact
from bot.stores.protocols import FactStore
from tools.declare import Injected, tool
from tools.errors import ToolBusinessError
from tools.types import ToolContext

MAX_FACT_CHARS = 500


@tool(
    name="remember",
    timeout=10.0,
    description=(
        "Store a fact about the person you are talking to, so you remember it in later "
        "conversations anywhere. Call it when they ask you to remember something (a preference, "
        "an allergy, a standing instruction). Write the fact as a short sentence about them."
    ),
)
async def remember(
    fact: Annotated[
        str, Field(description="The fact, as a short sentence, e.g. 'Prefers tea over coffee.'")
    ],
    ctx: ToolContext,
    facts: Injected[FactStore],
) -> dict[str, object]:
    text = " ".join(fact.split())
    if not normalize_fact(text):
        raise ToolBusinessError("the fact is empty: say what to remember")
    if len(text) > MAX_FACT_CHARS:
        raise ToolBusinessError(f"the fact is too long (over {MAX_FACT_CHARS} characters)")
    person = PersonKey.parse(ctx.speaker_id)  # ValueError: a caller bug, logged as unexpected
    stored = await facts.add_fact(
        person,
        text,
        source="user",
        session=SessionKey.parse(ctx.session_id),
        source_ref=ctx.turn_id or None,
    )
    return {"stored": True, "id": stored.id, "fact": stored.text}
