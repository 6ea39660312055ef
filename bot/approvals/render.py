"""How an approval request reads: the tool and its arguments, readable and bounded."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from bot.stores.approvals import Approval

VALUE_CHARS = 200  # of one argument's value shown; the rest is cut with a note
ARGUMENTS_SHOWN = 12


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    if len(text) > VALUE_CHARS:
        return text[:VALUE_CHARS] + f"… ({len(text) - VALUE_CHARS:,} more characters not shown)"
    return text


def argument_lines(arguments: str) -> list[str]:
    """`key: value` lines, long values cut with a note; past `ARGUMENTS_SHOWN`, a count."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return [_value(arguments)]
    if not isinstance(parsed, dict):
        return [_value(parsed)]
    if not parsed:
        return ["(no arguments)"]
    items = list(parsed.items())
    lines = [f"{str(k)[:64]}: {_value(v)}" for k, v in items[:ARGUMENTS_SHOWN]]
    if len(items) > ARGUMENTS_SHOWN:
        lines.append(f"… and {len(items) - ARGUMENTS_SHOWN} more arguments")
    return lines


def minutes(seconds: float) -> str:
    return f"{round(seconds)} s" if seconds < 120 else f"{round(seconds / 60)} min"


def request_text(approval: Approval, *, how: str) -> str:
    """One request as text: the tool, its arguments, how to answer (`how`) and until when."""
    lines = "\n".join(f"  {line}" for line in argument_lines(approval.arguments))
    valid = minutes(approval.expires_at - approval.created_at)
    return (
        f"I'd like to run `{approval.tool}`, which changes something, with:\n{lines}\n"
        f"{how} (valid for {valid})."
    )


CONSOLE_HOW = "Answer `/approve`, `/approve always` (this tool, here, from now on) or `/deny`"


OUTCOMES = {
    "pending": "waiting",
    "approved": "approved",
    "denied": "denied",
    "expired": "expired",
}


def _who(person_id: str) -> str:
    return person_id.rsplit(":", 1)[-1] if person_id else "nobody"


def audit_line(a: Approval) -> str:
    """One approval for `/tools audit`: when, tool, arguments (short), who asked and where, the
    decision (who, after how long) and what the tool came to (with the latency)."""
    when = datetime.fromtimestamp(a.created_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    args = "; ".join(argument_lines(a.arguments))
    args = args if len(args) <= 120 else args[:119] + "…"
    line = f"{when} — `{a.tool}` ({args}) asked by {_who(a.person)} in {a.place}: "
    line += OUTCOMES[a.status]
    if a.status in ("approved", "denied"):
        line += f" by {_who(a.decided_by)} after {minutes(a.decided_at - a.created_at)}"
    if a.outcome:
        line += f", {'ran: ' + a.outcome if a.status == 'approved' else a.outcome}"
        line += f" ({a.latency_ms:,.0f} ms from the request)"
    return line
