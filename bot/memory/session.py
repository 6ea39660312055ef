"""Session memory: durable messages + a hot copy in the cache + rolling summary and pinned facts.

Reads: the hot entry (state + the unsummarised tail) comes from the cache when its last seq matches
the store's (one indexed look-up), otherwise it is rebuilt from the store with bounded queries, so
the cost of a turn does not grow with the length of the conversation.

Compression: when the unsummarised tail crosses a message-count or token threshold, the oldest
part is folded into the rolling summary by a model call. The caller runs `compress()` in the
background (never on the reply path). If the call fails the old summary is kept, nothing is lost
(the context builder just drops the oldest raw turns to fit), and the failure is recorded in the
session's state (`summary_failures`, `summary_failed_at`): the next attempt waits 30 s, then
twice as long after each further failure, up to an hour, in every process (a broken summary
model costs one request per session per backoff step, not one per turn).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot import metrics, tracing
from bot.keys import SessionKey
from bot.memory.prompts import SUMMARY_SCHEMA, SUMMARY_SYSTEM
from bot.memory.render import (
    RECALLED_FROM,
    RECALLED_TOKENS,
    group_turns,
    is_private_turn,
    transcript_line,
)
from bot.stores.protocols import Cache, SessionStore
from bot.stores.records import NewMessage, PinnedFact, SessionState, StoredMessage, utcnow
from bot.tokens import TokenCounter

log = logging.getLogger(__name__)

TAIL_LIMIT = 160  # most unsummarised messages kept hot / loaded per turn
FOLD_SCAN = 120  # most messages read for one summarisation
MAX_PINNED = 30
SUMMARY_RETRY_FIRST = 30.0  # seconds after a first failed summary before the next attempt
SUMMARY_RETRY_MAX = 3600.0  # the backoff doubles per failure up to this


def summary_backoff(failures: int) -> float:
    """Seconds to wait after `failures` failed summaries in a row (0 when none failed)."""
    if failures <= 0:
        return 0.0
    return min(SUMMARY_RETRY_FIRST * 2.0 ** min(failures - 1, 20), SUMMARY_RETRY_MAX)


def context_tokens(m: StoredMessage) -> int:
    """About what a stored message takes in the context: its content, the memories recalled
    with it (they stay with it in the history), and the message overhead."""
    recalled = m.meta.get(RECALLED_TOKENS)
    return m.tokens + 4 + (recalled + 4 if isinstance(recalled, int) and recalled > 0 else 0)


def hot_key(session_id: str) -> str:
    return f"hot:{session_id}"


class Summariser(Protocol):
    async def __call__(
        self, messages: list[dict[str, Any]], response_format: dict[str, Any]
    ) -> str:
        """Return the model's JSON text (no tools offered)."""


@dataclass
class HotSession:
    state: SessionState
    tail: list[StoredMessage] = field(default_factory=list)  # seq > state.summary_upto_seq
    # The JSON form of tail[:len(dumped)], as the cache holds it: a save dumps only what is new
    # (dumping a long tail twice a turn was a quarter of a turn's CPU in old conversations).
    dumped: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def last_seq(self) -> int:
        return self.tail[-1].seq if self.tail else self.state.summary_upto_seq


@dataclass(frozen=True)
class CompressionPolicy:
    max_messages: int  # fold when the unsummarised tail has more messages than this...
    max_tokens: int  # ...or more tokens than this
    keep_tokens: int  # tokens of newest raw history kept out of the fold
    summary_tokens: int  # length cap of the summary
    input_tokens: int  # cap of one summarisation request

    @classmethod
    def for_budget(cls, budget: int, reply_tokens: int) -> CompressionPolicy:
        history = max(budget - reply_tokens - 600, 400)
        return cls(
            max_messages=40,
            max_tokens=history * 6 // 10,
            keep_tokens=history * 3 // 10,
            summary_tokens=max(budget // 8, 120),
            input_tokens=max(budget - reply_tokens - 300, 400),
        )


class SessionMemory:
    def __init__(
        self,
        store: SessionStore,
        cache: Cache,
        counter: TokenCounter,
        policy: CompressionPolicy,
        *,
        idle_ttl: float = 1800.0,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.cache = cache
        self.counter = counter
        self.policy = policy
        self.idle_ttl = idle_ttl
        self.clock = clock  # wall clock (UTC): the backoff is shared by every process

    @staticmethod
    def _hot_key(session: SessionKey) -> str:
        return hot_key(session.id)

    async def load(self, session: SessionKey) -> HotSession:
        """The state (always from the store: small, and the summariser may have just changed it)
        and the unsummarised tail (from the cache when its last seq is the store's last seq).

        One store round trip when the cache is current (`Store.head`), and for a session that
        has no messages yet; two otherwise. The head is the seq counter, which erasures do not
        lower: after the newest messages were erased the cached tail is re-read from the store
        until the next message is written (then it is current again)."""
        last_seq, stored_state = await self.store.head(session)
        state = stored_state or SessionState(session=session.id)
        if last_seq == 0:
            return HotSession(state, [])  # no message was ever written: nothing to read
        hot = await self._cached_tail(session, state)
        if hot is None or hot.last_seq != last_seq:
            hot = HotSession(state, await self.store.recent(session, limit=TAIL_LIMIT))
            await self._save_tail(session, hot)
        upto = state.summary_upto_seq
        if hot.tail and hot.tail[0].seq <= upto:  # drop what the summary already covers
            keep = [i for i, m in enumerate(hot.tail) if m.seq > upto]
            aligned = len(hot.dumped) == len(hot.tail)
            hot.tail = [hot.tail[i] for i in keep]
            hot.dumped = [hot.dumped[i] for i in keep] if aligned else []
        return hot

    async def _cached_tail(self, session: SessionKey, state: SessionState) -> HotSession | None:
        try:
            raw = await self.cache.get_json(self._hot_key(session))
            if not isinstance(raw, list):
                return None
            # The dicts are this read's own copies (the cache hands out fresh JSON values).
            return HotSession(state, [StoredMessage.model_validate(m) for m in raw], raw)
        except Exception:  # a corrupt or old-format entry is just a miss
            log.warning("hot_session_unreadable", extra={"fields": {"session": session.id}})
            return None

    async def _save_tail(self, session: SessionKey, hot: HotSession) -> None:
        if len(hot.dumped) > len(hot.tail):
            hot.dumped = []
        hot.dumped.extend(m.model_dump(mode="json") for m in hot.tail[len(hot.dumped) :])
        payload = hot.dumped[-TAIL_LIMIT:]
        await self.cache.set_json(self._hot_key(session), payload, ttl=self.idle_ttl)

    async def forget_hot(self, session_ids: list[str]) -> None:
        """Drop the cached copies of these sessions (their stored messages changed)."""
        for session_id in session_ids:
            await self.cache.delete(hot_key(session_id))

    async def append(
        self, session: SessionKey, hot: HotSession, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        """Write messages durably first, then to the hot copy."""
        for msg in messages:
            if not msg.tokens:
                msg.tokens = self.counter.count(msg.content)
        with tracing.span("store.append", {"messages": len(messages)}):
            stored = await self.store.append(session, messages)
        hot.tail.extend(stored)
        await self._save_tail(session, hot)
        return stored

    def needs_compression(self, hot: HotSession) -> bool:
        tail = hot.tail
        if tail and tail[0].seq > hot.state.summary_upto_seq + 1:
            return True  # a backlog older than the hot tail is waiting to be folded
        if len(tail) > self.policy.max_messages:
            return True
        return sum(context_tokens(m) for m in tail) > self.policy.max_tokens

    def summary_due(self, state: SessionState) -> bool:
        """False while the session backs off after failed summaries."""
        if state.summary_failures <= 0 or state.summary_failed_at is None:
            return True
        wait = timedelta(seconds=summary_backoff(state.summary_failures))
        return self.clock() >= state.summary_failed_at + wait

    async def record_failure(self, session: SessionKey) -> None:
        """Count a failed summary in the stored state (the backoff's input); best effort."""
        metrics.SUMMARIES.labels("failed").inc()
        for _ in range(3):  # optimistic concurrency: re-read on conflict
            current = await self.store.get_state(session) or SessionState(session=session.id)
            current.summary_failures += 1
            current.summary_failed_at = self.clock()
            if await self.store.put_state(session, current):
                return

    def _keep_from_seq(self, tail: list[StoredMessage]) -> int:
        """First seq of the newest whole turns kept raw (about `keep_tokens` of them)."""
        groups = group_turns(tail)
        kept_tokens = 0
        keep_from = len(groups)
        for i in range(len(groups) - 1, -1, -1):
            cost = sum(context_tokens(m) for m in groups[i])
            if kept_tokens + cost > self.policy.keep_tokens and keep_from < len(groups):
                break
            kept_tokens += cost
            keep_from = i
            if len(groups) - i >= 6 and kept_tokens > self.policy.keep_tokens // 2:
                break
        if keep_from >= len(groups):
            return tail[-1].seq + 1 if tail else 1
        return groups[keep_from][0].seq

    async def _fold_range(self, session: SessionKey, hot: HotSession) -> list[StoredMessage]:
        """The oldest unsummarised whole turns, read from the store (not the bounded hot tail,
        so a backlog left by failed summaries is caught up rather than skipped), capped so the
        summarisation request fits its own budget."""
        start = hot.state.summary_upto_seq
        keep_from = self._keep_from_seq(hot.tail)
        scan_to = min(keep_from - 1, start + FOLD_SCAN)
        if scan_to <= start:
            return []
        candidates = await self.store.between(session, after_seq=start, upto_seq=scan_to)
        groups = group_turns(candidates)
        if scan_to < keep_from - 1 and len(groups) > 1:
            groups = groups[:-1]  # the scan may have cut the last turn in half
        folded: list[StoredMessage] = []
        used = 0
        for group in groups:
            cost = sum(self.counter.count(transcript_line(m)) + 2 for m in group)
            if folded and used + cost > self.policy.input_tokens:
                break
            folded.extend(group)
            used += cost
        return folded

    async def compress(self, session: SessionKey, summarise: Summariser) -> bool:
        """Fold the oldest unsummarised turns into the summary. Returns True on success."""
        started = time.perf_counter()
        hot = await self.load(session)
        if not self.needs_compression(hot) or not self.summary_due(hot.state):
            return False
        fold = await self._fold_range(session, hot)
        if not fold:
            return False
        state = hot.state
        # Personal `remember` turns stay out of the shared summary (the fact is in the person's
        # own store); the range is still marked as folded.
        shared = [m for g in group_turns(fold) if not is_private_turn(g) for m in g]
        lines = [transcript_line(m) for m in shared] or ["(nothing new to add)"]
        transcript = self._cap_transcript(lines)
        request = [
            {
                "role": "system",
                "content": SUMMARY_SYSTEM.format(max_words=self.policy.summary_tokens * 2 // 3),
            },
            {
                "role": "user",
                "content": (
                    f"Earlier summary:\n{state.summary or '(none)'}\n\n"
                    f"Key facts so far:\n"
                    + ("\n".join(f"- {p.text}" for p in state.pinned) or "(none)")
                    + f"\n\nNew messages:\n{transcript}"
                ),
            },
        ]
        try:
            raw = await summarise(request, SUMMARY_SCHEMA)
            summary, key_facts = self._parse_summary(raw)
        except Exception as exc:
            log.warning(
                "summary_failed",
                extra={
                    "fields": {
                        "session": session.id,
                        "error": type(exc).__name__,
                        "failures": state.summary_failures + 1,
                    }
                },
            )
            await self.record_failure(session)
            return False
        upto = fold[-1].seq
        # Key facts can only be attributed when one person spoke in the folded range; "" means
        # "anyone in summary_speakers" (erased with the summary when one of them asks).
        users = {m.speaker for m in shared if m.role == "user"}
        owner = users.pop() if len(users) == 1 else ""
        for _ in range(2):  # optimistic concurrency: re-read once on conflict
            current = await self.store.get_state(session) or SessionState(session=session.id)
            if current.erasures != state.erasures:
                # `/memory forget all` ran while the model summarised: the fold may hold erased
                # turns. Drop it; the next run folds what is left.
                log.info(
                    "summary_discarded_after_erasure", extra={"fields": {"session": session.id}}
                )
                metrics.SUMMARIES.labels("discarded").inc()
                return False
            if current.summary_upto_seq >= upto:
                metrics.SUMMARIES.labels("discarded").inc()
                return False  # someone else folded this range already
            pinned = list(current.pinned)
            known = {p.text.strip().lower() for p in pinned}
            for raw_fact in key_facts:
                text = raw_fact.strip().lstrip("-•* ").strip()
                if text and text.lower() not in known:
                    pinned.append(PinnedFact(text=text, speaker=owner, seq=upto))
                    known.add(text.lower())
            current.summary = self.counter.truncate(summary, self.policy.summary_tokens)
            current.summary_upto_seq = upto
            # Whose words it may hold: the people of the folded turns, and those whose memories
            # were recalled into them (the bot's replies there may repeat or paraphrase them).
            recalled_from = {str(p) for m in shared for p in (m.meta.get(RECALLED_FROM) or ()) if p}
            current.summary_speakers = sorted(
                {*current.summary_speakers, *(m.speaker for m in shared), *recalled_from}
            )
            current.pinned = pinned[-MAX_PINNED:]
            current.summary_failures = 0
            current.summary_failed_at = None
            if await self.store.put_state(session, current):
                break
        else:
            metrics.SUMMARIES.labels("discarded").inc()
            return False
        metrics.SUMMARIES.labels("ok").inc()
        log.info(
            "summary_written",
            extra={
                "fields": {
                    "session": session.id,
                    "folded": len(fold),
                    "upto_seq": upto,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                }
            },
        )
        return True

    def _cap_transcript(self, lines: list[str]) -> str:
        budget = self.policy.input_tokens
        out: list[str] = []
        for line in lines:
            cost = self.counter.count(line) + 1
            if cost > budget:
                line = self.counter.truncate(line, max(budget - 1, 0))
                cost = budget
            out.append(line)
            budget -= cost
            if budget <= 0:
                break
        return "\n".join(out)

    @staticmethod
    def _parse_summary(raw: str) -> tuple[str, list[str]]:
        """The summary JSON, also when wrapped in prose or a code fence (plain-mode servers)."""
        try:
            data = json.loads(raw)
        except ValueError:
            start, end = raw.find("{"), raw.rfind("}")
            if start < 0 or end <= start:
                raise
            data = json.loads(raw[start : end + 1])
        if not isinstance(data, dict) or not isinstance(data.get("summary"), str):
            raise ValueError("summary JSON lacks a 'summary' string")
        facts = data.get("key_facts") or []
        if not isinstance(facts, list):
            facts = []
        return data["summary"].strip(), [str(f) for f in facts if str(f).strip()]
