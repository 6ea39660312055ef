"""A message the session already holds: answered (say the same answer again) or cut short.

A platform event can reach the turn twice: the durable inbox re-runs an event whose worker died
mid-turn, or a second event id carries the same message. The stored conversation tells what the
first run got to, by the platform's message id (`meta["message_id"]`, unique in a session):

- the answer was stored: the turn delivers that answer again (the adapter updates the reply it
  had posted) and asks the model nothing;
- it was cut short: the turn goes on as the same turn (same `turn_id`, the person's message not
  stored twice), with the tool rounds that completed (call and result both stored) back in its
  context, so their tools are not called again. Write tools asked for again are replayed by the
  executor's idempotency keys anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.memory.render import RECALLED, render_group
from bot.stores.records import StoredMessage


@dataclass(frozen=True)
class PriorTurn:
    turn_id: str
    index: int  # of the person's message in the tail: the history before the turn ends there
    user: StoredMessage
    reply: str | None  # the stored final answer; None when the turn was cut short
    rounds: list[StoredMessage]  # its stored tool calls and results, in order

    @property
    def recalled(self) -> str:
        value = self.user.meta.get(RECALLED)
        return value if isinstance(value, str) else ""

    def completed_rounds(self) -> list[dict[str, Any]]:
        """The tool rounds whose calls all have results, as Chat Completions messages."""
        return render_group(self.rounds)


def find_prior_turn(
    tail: list[StoredMessage], message_id: str | None, speaker: str, *, turn_id: str = ""
) -> PriorTurn | None:
    """The stored turn of this platform message by this speaker, if the tail holds one; with
    `turn_id` (a turn paused for an approval, `bot.approvals.desk`), that turn."""
    if not message_id and not turn_id:
        return None
    for i in range(len(tail) - 1, -1, -1):
        m = tail[i]
        if m.role != "user" or m.speaker != speaker:
            continue
        if m.turn_id != turn_id if turn_id else m.meta.get("message_id") != message_id:
            continue
        after = [x for x in tail[i + 1 :] if x.turn_id == m.turn_id]
        reply = next((x.content for x in after if x.role == "assistant" and not x.tool_calls), None)
        rounds = [x for x in after if x.role == "tool" or (x.role == "assistant" and x.tool_calls)]
        return PriorTurn(turn_id=m.turn_id, index=i, user=m, reply=reply, rounds=rounds)
    return None
