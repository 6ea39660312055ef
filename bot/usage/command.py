"""`/usage`: your own tokens and cost today, this week and this month; admins also the team's
month by place, person, model and kind. The answer is ephemeral on every platform."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from bot.core import CommandReply, CommandRequest
from bot.keys import PersonKey, TeamKey
from bot.stores.feedback import FeedbackTotals
from bot.stores.usage import UsageRow, UsageStore
from bot.usage.budgets import period_start
from bot.usage.report import feedback_lines, personal, team_report, usage_rows, utcnow

FeedbackOf = Callable[[TeamKey, float], Awaitable[FeedbackTotals]]


class UsageCommands:
    def __init__(
        self,
        store: UsageStore | None,
        pending: Callable[[], Sequence[UsageRow]],
        *,
        is_admin: Callable[[CommandRequest], bool],
        feedback: FeedbackOf | None = None,
    ) -> None:
        self.store = store
        self.pending = pending
        self.is_admin = is_admin
        self.feedback = feedback  # the votes on replies (`bot.stores.feedback`), for admins

    async def handle(self, req: CommandRequest) -> CommandReply:
        words = req.text.strip().casefold().split()
        if words not in ([], ["show"]):
            from bot.command_registry import USAGE

            return CommandReply(USAGE.help, ok=False)
        now = utcnow()
        team = TeamKey(req.platform, req.team).id
        person = PersonKey(req.platform, req.team, req.user).id
        # The earliest of this week and this month.
        since = min(period_start("week", now), period_start("month", now))
        if not self.is_admin(req):
            mine = await usage_rows(self.store, self.pending, since=since, team=team, person=person)
            return CommandReply(personal(mine, now))
        rows = await usage_rows(self.store, self.pending, since=since, team=team)
        mine = [r for r in rows if r.person == person]
        text = personal(mine, now) + "\n\n" + team_report(rows, now)
        if self.feedback is not None:
            month = period_start("month", now)
            start = datetime(month.year, month.month, month.day, tzinfo=UTC).timestamp()
            votes = await self.feedback(TeamKey(req.platform, req.team), start)
            text += "\n\n" + feedback_lines(
                votes,
                people=True,
                where=lambda c: f"<#{c}>",
                title="Feedback on replies this month",
            )
        return CommandReply(text)
