"""The built-in `remember` tool, always offered: stores a fact for the speaker.

The speaker comes from the ToolContext the turn built (platform + team + user), never from the
model's arguments, so the model cannot file a fact under someone else.

The fact is reconciled against the person's live facts (`bot.memory.reconcile`): a new subject is
added, a fact on a known subject replaces the old version (kept in history), a repeat changes
nothing. `topic` names the subject when the model knows it.

Where and when: the fact carries the audience of the place it was said in (`ctx.audience`, see
`bot.audience`: said in a DM, it is used in the person's DMs only; in a private channel, there
and in their DMs; in a public channel, anywhere in the team) and is true since the message was
said (`ctx.said_at`), so an older statement never replaces a newer one. The answer to the model
never quotes a fact this place may not use (a replaced fact remembered in a DM stays unsaid in
a channel).

It is not declared `write=True`: reconciling is idempotent (the same fact again is a NOOP), and
the executor's replay cache would go stale after `/memory forget` (asking to remember the same
thing again must store it again).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bot.audience import UNKNOWN_FACT, Audience, fact_audiences_for
from bot.keys import PersonKey, SessionKey
from bot.memory.reconcile import Candidate, Reconciler
from bot.stores.ids import normalize_fact
from tools.declare import Injected, tool
from tools.errors import ToolBusinessError
from tools.types import ToolContext

MAX_FACT_CHARS = 500


@tool(
    name="remember",
    timeout=20.0,
    description=(
        "Store a fact about the person you are talking to, so you remember it in their later "
        "conversations (where everyone reading could have read it: said in a DM, in their DMs "
        "only). Call it when they ask you to remember something (a preference, an allergy, a "
        "standing instruction). Write the fact as a short sentence about them, in their words. "
        "A new fact on a subject already known replaces the old one (history is kept)."
    ),
)
async def remember(
    fact: Annotated[
        str, Field(description="The fact, as a short sentence, e.g. 'Prefers tea over coffee.'")
    ],
    ctx: ToolContext,
    reconciler: Injected[Reconciler],
    topic: Annotated[
        str | None,
        Field(
            description=(
                "The subject, as a short snake_case key (diet, allergy, home_city, "
                "preferred_units...), so a later fact on it replaces this one"
            ),
            max_length=64,
        ),
    ] = None,
) -> dict[str, object]:
    text = " ".join(fact.split())
    if not normalize_fact(text):
        raise ToolBusinessError("the fact is empty: say what to remember")
    if len(text) > MAX_FACT_CHARS:
        raise ToolBusinessError(f"the fact is too long (over {MAX_FACT_CHARS} characters)")
    person = PersonKey.parse(ctx.speaker_id)  # ValueError: a caller bug, logged as unexpected
    audience = Audience.parse(ctx.audience or UNKNOWN_FACT)
    decision = await reconciler.reconcile(
        person,
        Candidate(
            text=text,
            key=topic,
            source="user",
            explicit=True,
            session=SessionKey.parse(ctx.session_id),
            source_ref=ctx.turn_id or None,
            source_messages=(ctx.message_ref,) if ctx.message_ref else (),
            said_at=ctx.said_at,
            audience=audience.id,
        ),
    )
    usable = fact_audiences_for(audience)
    out: dict[str, object] = {"outcome": decision.outcome.lower()}
    if decision.fact is not None and (usable is None or decision.fact.audience in usable):
        out.update(stored=True, id=decision.fact.id, fact=decision.fact.text)
    else:
        out["stored"] = decision.fact is not None
    if decision.outcome == "REJECT" and decision.reason:
        out["reason"] = decision.reason
    if decision.closed is not None and (usable is None or decision.closed.audience in usable):
        out["replaced"] = decision.closed.text
    return out
