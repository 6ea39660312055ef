"""Turn admission per person and per team, so one person or one team cannot starve the others.

Two fixed-window counters (`BOT_RATE_USER`, `BOT_RATE_TEAM`, "N/SECONDS") are kept in the cache:
in Redis they hold across every replica, in the in-process cache per process; both counters move
in one round trip. Fixed windows may let through up to twice the rate across a window boundary,
which is fine for a politeness limit and costs one counter per scope instead of a log of times.
A refused attempt counts too, so retrying in a loop does not get through sooner.

A flood is refused once, then dropped quietly: only the first attempt past a limit in a window
gets the polite reply (the counter says which one it is, so this holds across replicas too);
the later ones return `DROP` and no reply is posted. Posting a refusal per attempt would
amplify the flood (500 mentions in 0.2 s were 480 posted refusals, minutes of queued sends on
Discord). The team queue bound, counted in this process, refuses each person once per
`QUEUE_REFUSAL_SECONDS` the same way (someone else in the team who finds it full is still
told). This holds for every platform (Slack and Discord alike).

`BOT_TEAM_QUEUE` bounds the turns of one team waiting or running in this process: a burst from
one team is refused politely instead of queueing behind the session locks without end.

`bot chat` (platform "console") is never limited: its only user is the operator at the terminal,
or a script the operator runs.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cachetools import TTLCache

from bot.messages import IncomingMessage
from bot.metrics import TURNS_REFUSED
from bot.stores.protocols import Cache, StoreUnavailable

log = logging.getLogger(__name__)

USER_RATE_REPLY = (
    "You're sending me messages faster than I can take them. Please wait a minute and try again."
)
TEAM_RATE_REPLY = (
    "This workspace is sending me more requests than I can take right now. "
    "Please try again in a minute."
)
TEAM_QUEUE_REPLY = (
    "I have too many requests from this workspace in progress right now. "
    "Please try again in a moment."
)


DROP = ""  # `refusal()`: refused, and the person was already told in this window: say nothing
QUEUE_REFUSAL_SECONDS = 60


@dataclass(frozen=True)
class Rate:
    """At most `count` turns per `seconds`; `count == 0` means no limit."""

    count: int
    seconds: int

    @classmethod
    def parse(cls, text: str) -> Rate:
        """'30/60' (30 turns a minute); '0' or 'off' turns the limit off."""
        value = text.strip().lower()
        if value in ("0", "off", "none"):
            return cls(0, 1)
        count, sep, seconds = value.partition("/")
        if not sep or not count.isdigit() or not seconds.isdigit():
            raise ValueError("must be N/SECONDS (for example 30/60), or off")
        rate = cls(int(count), int(seconds))
        if rate.count < 1 or not 1 <= rate.seconds <= 86_400:
            raise ValueError("needs N >= 1 and 1 <= SECONDS <= 86400 (or off)")
        return rate

    @property
    def enabled(self) -> bool:
        return self.count > 0


class TurnLimiter:
    def __init__(
        self,
        cache: Cache,
        *,
        per_user: Rate,
        per_team: Rate,
        team_queue: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: wall-clock seconds (windows are aligned on it, so every replica agrees)."""
        self.cache = cache
        self.per_user = per_user
        self.per_team = per_team
        self.team_queue = team_queue
        self._clock = clock
        self._in_flight: Counter[str] = Counter()  # team key -> turns admitted, not finished
        # People told "too many in progress" lately: told once per QUEUE_REFUSAL_SECONDS.
        self._queue_told: TTLCache[str, bool] = TTLCache(
            maxsize=100_000, ttl=QUEUE_REFUSAL_SECONDS, timer=clock
        )

    async def refusal(self, message: IncomingMessage) -> str | None:
        """The polite reply if this message must not start a turn now, `DROP` if it must not
        and the person was already told in this window, else None. A message whose event was
        admitted at an earlier attempt (`IncomingMessage.admission`) is admitted again without
        being counted; one admitted now has its admission recorded with its event."""
        if message.platform == "console":
            return None
        admission = message.admission
        if admission is not None and admission.admitted:
            return None  # a re-run of a turn admitted before (its replica died): the same turn
        team = message.session.team_key.id
        if self.team_queue and self._in_flight[team] >= self.team_queue:
            person = message.person.id  # each person is told once; their flood is dropped
            told = person in self._queue_told
            self._queue_told[person] = True
            return self._refused(message, "team_queue", TEAM_QUEUE_REPLY, quiet=told)
        checks = [
            (rate, scope, reason, reply)
            for rate, scope, reason, reply in (
                (self.per_user, message.person.id, "user_rate", USER_RATE_REPLY),
                (self.per_team, team, "team_rate", TEAM_RATE_REPLY),
            )
            if rate.enabled
        ]
        if not checks:
            return None
        now = self._clock()
        keys = [
            f"rate:{reason}:{scope}:{int(now // rate.seconds)}" for rate, scope, reason, _ in checks
        ]
        try:
            counts = await self.cache.incr(keys, ttl=max(r.seconds for r, *_ in checks) + 1)
        except StoreUnavailable:
            return None  # a limit is politeness: never refuse a turn because the cache is down
        for (rate, _scope, reason, reply), count in zip(checks, counts, strict=True):
            if count > rate.count:
                return self._refused(message, reason, reply, quiet=count > rate.count + 1)
        if admission is not None:
            await admission.record()
        return None

    @contextmanager
    def admitted(self, message: IncomingMessage) -> Iterator[None]:
        """Count the turn against its team's queue bound while it waits and runs."""
        team = message.session.team_key.id
        self._in_flight[team] += 1
        try:
            yield
        finally:
            self._in_flight[team] -= 1
            if self._in_flight[team] <= 0:
                del self._in_flight[team]

    def _refused(
        self, message: IncomingMessage, reason: str, reply: str, *, quiet: bool = False
    ) -> str:
        TURNS_REFUSED.labels(message.platform, reason).inc()
        if quiet:
            return DROP  # counted; logged once, with the first refusal of the window
        log.info(
            "turn_refused",
            extra={
                "fields": {
                    "reason": reason,
                    "team": message.session.team,
                    "platform": message.platform,
                }
            },
        )
        return reply
