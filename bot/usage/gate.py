"""Budgets with reservation: a turn checks its place's budgets, reserves its first request's
cost, and settles on what it really used.

Every budget that applies is counted on a shared counter (`Cache.incr`: Redis with replicas,
the process's own otherwise), one per budget scope and period: the team, a channel, a person in
the team or in a channel. At the turn's start a counter at 100 % refuses it with one line that
says when the budget resets (no model request); at 80 % the turn runs lean. Before the first
model request the turn adds that request's cost (its counted prompt plus the reply allowance)
to every counter at once and looks at what the counters held before its own amount: at or past
the limit, the amount is taken back and the turn is refused. So concurrent turns, in any
replica, are admitted only while the counters are under the limit, and the budget is overshot
by at most the turns that were admitted together under it: one turn's cost when each turn is
one request (measured in tests/core/test_budgets.py). After the turn its real usage replaces
the reservation. A dollar budget counts priced models only (`BOT_PRICES`).

A counter that is missing (a new period, a restarted cache) is seeded once from the usage
store's rows of the period. Background work (summaries, consolidation) is added to the team's
counters this process knows and never refuses anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from cachetools import LRUCache

from bot.messages import IncomingMessage
from bot.policy import PlacePolicy, ScopedBudget
from bot.stores.protocols import Cache
from bot.stores.usage import UsageRow, UsageStore
from bot.usage.bill import Bill
from bot.usage.budgets import format_amount, period_end, period_start, when_it_resets
from bot.usage.prices import Prices

log = logging.getLogger(__name__)

LEAN_AT = 0.8
ALERTS = (0.8, 1.0)
Alert = Callable[[str, str, str], Awaitable[None]]  # team id, place ("" team-wide), text


@dataclass(frozen=True, slots=True)
class BudgetCounter:
    scoped: ScopedBudget
    key: str
    team: str
    place: str  # "" unless the budget was set on a channel
    person: str  # "" unless it is a person_budget
    start: date
    end: datetime

    @property
    def limit(self) -> int:
        return self.scoped.budget.amount

    def who(self) -> str:
        """Whose budget it is, as the person reads it."""
        if self.person:
            return "your budget here" if self.place else "your budget in this team"
        return "this channel's budget" if self.place else "this team's budget"

    def spent(self, rows: Sequence[UsageRow]) -> int:
        """What the stored rows say this counter has used (for seeding)."""
        total = 0
        for r in rows:
            if self.place and r.place != self.place:
                continue
            if self.person and r.person != self.person:
                continue
            total += r.tokens if self.scoped.budget.unit == "tokens" else r.cost_micros
        return total


@dataclass
class Hold:
    """One turn's budgets: reserve before the first request, settle after the turn."""

    gate: BudgetGate
    counters: list[BudgetCounter]
    model: str
    lean: bool = False
    reserved: list[int] = field(default_factory=list)

    async def reserve(self, prompt_tokens: int, max_completion: int) -> str | None:
        """Add the first request's cost; the refusal line if a budget was already used up."""
        amounts = [
            self.gate.amount(c, self.model, prompt_tokens, max_completion) for c in self.counters
        ]
        values = await self.gate.add(self.counters, amounts)
        over = [
            c for c, v, a in zip(self.counters, values, amounts, strict=True) if v - a >= c.limit
        ]
        if over:
            await self.gate.add(self.counters, [-a for a in amounts])
            return self.gate.refusal(over[0])
        self.reserved = amounts
        return None

    async def settle(self, bill: Bill) -> None:
        if not self.counters:
            return
        reserved = self.reserved or [0] * len(self.counters)
        used = [
            bill.tokens if c.scoped.budget.unit == "tokens" else bill.micros for c in self.counters
        ]
        values = await self.gate.add(
            self.counters, [u - r for u, r in zip(used, reserved, strict=True)]
        )
        await self.gate.alerts(self.counters, values)


class BudgetGate:
    def __init__(
        self,
        cache: Cache,
        usage: UsageStore | None,
        prices: Prices,
        *,
        default_model: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cache = cache
        self.usage = usage
        self.prices = prices
        self.default_model = default_model
        self.clock = clock
        self.alert: Alert | None = None  # set by the app: tells the team's admins
        self._seeded: LRUCache[str, bool] = LRUCache(maxsize=50_000)
        self._team_counters: LRUCache[str, tuple[BudgetCounter, ...]] = LRUCache(maxsize=10_000)
        self._background: set[asyncio.Task[None]] = set()

    def counters(self, msg: IncomingMessage, policy: PlacePolicy) -> list[BudgetCounter]:
        now = self.clock()
        team = msg.session.team_key.id
        found = []
        for scoped in policy.budgets:
            budget = scoped.budget
            place = msg.channel if scoped.layer == "channel" else ""
            person = msg.person.id if scoped.key == "person_budget" else ""
            start = period_start(budget.period, now)
            key = f"budget:{team}|{place}|{person}|{budget.period}:{start}:{budget.unit}"
            found.append(
                BudgetCounter(
                    scoped, key, team, place, person, start, period_end(budget.period, now)
                )
            )
        return found

    async def open(self, msg: IncomingMessage, policy: PlacePolicy) -> Hold | str | None:
        """None: no budget applies here. A string: the refusal line (a budget is used up).
        Otherwise the turn's hold, lean when a budget is at 80 % or more."""
        if not policy.budgets:
            return None
        counters = self.counters(msg, policy)
        team_wide = tuple(c for c in counters if not c.place and not c.person)
        if team_wide:
            self._team_counters[team_wide[0].team] = team_wide
        await self._seed(counters)
        values = await self.add(counters, [0] * len(counters))
        used_up = [c for c, v in zip(counters, values, strict=True) if v >= c.limit]
        if used_up:
            await self.alerts(counters, values)
            return self.refusal(used_up[0])
        lean = any(v >= LEAN_AT * c.limit for c, v in zip(counters, values, strict=True))
        model = (policy.lean_model if lean else "") or policy.model or self.default_model
        return Hold(self, counters, model, lean=lean)

    def amount(self, c: BudgetCounter, model: str, prompt: int, completion: int) -> int:
        if c.scoped.budget.unit == "tokens":
            return prompt + completion
        return self.prices.cost(model, prompt, 0, completion) or 0

    async def add(self, counters: Sequence[BudgetCounter], amounts: Sequence[int]) -> list[int]:
        if not counters:
            return []
        ttl = max(60.0, max((c.end - self.clock()).total_seconds() for c in counters) + 86_400)
        return await self.cache.incr([c.key for c in counters], ttl=ttl, amounts=list(amounts))

    async def _seed(self, counters: Sequence[BudgetCounter]) -> None:
        """A counter new to the cache starts from what the store holds for its period."""
        fresh = [c for c in counters if c.key not in self._seeded]
        if not fresh:
            return
        ttl = max(60.0, max((c.end - self.clock()).total_seconds() for c in fresh) + 86_400)
        seeding = [c for c in fresh if await self.cache.set_nx(c.key + ":seeded", ttl=ttl)]
        if seeding and self.usage is not None:
            since = min(c.start for c in seeding).isoformat()
            rows = await self.usage.usage(since=since, team=seeding[0].team)
            amounts = [c.spent([r for r in rows if r.day >= c.start.isoformat()]) for c in seeding]
            if any(amounts):
                await self.add(seeding, amounts)
        for c in fresh:
            self._seeded[c.key] = True

    def refusal(self, c: BudgetCounter) -> str:
        budget = c.scoped.budget
        return (
            f"Sorry, {c.who()} ({format_amount(budget.amount, budget.unit)} a {budget.period}) "
            f"is used up, so I can't answer right now. It resets "
            f"{when_it_resets(budget.period, self.clock())}."
        )

    async def alerts(self, counters: Sequence[BudgetCounter], values: Sequence[int]) -> None:
        """One message to the admins when a team's or channel's budget crosses 80 % and
        100 % in a period (a person's own budget tells only that person, by refusing)."""
        for c, value in zip(counters, values, strict=True):
            if c.person:
                continue
            crossed = [share for share in ALERTS if value >= share * c.limit]
            if not crossed:
                continue
            # Crossing both at once (one big turn) is one message, about the higher one.
            fresh = [
                share
                for share in crossed
                if await self.cache.set_nx(f"{c.key}:alert:{share}", ttl=40 * 86_400.0)
            ]
            share = max(crossed)
            if share in fresh:
                budget = c.scoped.budget
                where = f"<#{c.place}>" if c.place else "the whole team"
                text = (
                    f"Budget alert: {where} has used {min(value / c.limit, 9.99):.0%} of its "
                    f"{budget.shown()} budget ({format_amount(max(value, 0), budget.unit)}). "
                    + (
                        "Turns there are refused until it resets "
                        f"{when_it_resets(budget.period, self.clock())}."
                        if share >= 1.0
                        else "Turns there now run lean (shorter context, no recall, and the "
                        "`lean_model` if one is set)."
                    )
                )
                log.warning(
                    "budget_alert",
                    extra={"fields": {"team": c.team, "place": c.place, "share": share}},
                )
                if self.alert is not None:  # off the turn's path: a DM may be slow
                    self._spawn(self._tell(self.alert, c.team, c.place, text))

    async def _tell(self, alert: Alert, team: str, place: str, text: str) -> None:
        try:
            await alert(team, place, text)
        except Exception as exc:
            log.warning("budget_alert_failed", extra={"fields": {"error": type(exc).__name__}})

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self, within: float = 10.0) -> None:
        """Let alerts and background counts in flight finish (at most `within` seconds)."""
        pending = [t for t in self._background if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=within)

    def background(self, bill: Bill, tokens: int, micros: int) -> None:
        """Background work's usage on the team's counters (never refuses, never waits)."""
        counters = self._team_counters.get(bill.team)
        if not counters:
            return
        amounts = [tokens if c.scoped.budget.unit == "tokens" else micros for c in counters]
        self._spawn(self._add_quietly(counters, amounts))

    async def _add_quietly(self, counters: Sequence[BudgetCounter], amounts: list[int]) -> None:
        try:
            await self.add(counters, amounts)
        except Exception as exc:
            log.warning("budget_background_failed", extra={"fields": {"error": type(exc).__name__}})
