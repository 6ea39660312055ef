"""Reconciling a candidate fact against the person's live facts: ADD, UPDATE, DELETE, NOOP or
REJECT, so the store never holds two live facts that contradict (mem0 only adds; this does not).

Order of checks, cheapest first:
1. rules (`bot.memory.fact_rules`): greetings, questions, passing states and guesses are
   REJECTed without a model call (unless the person explicitly asked to remember it);
2. an exact or near duplicate of a live fact is a NOOP (no model call);
3. otherwise the model decides (structured output, falling back like session summaries) and its
   answer is checked: an UPDATE or DELETE may only touch a live fact on the same subject (same
   key, or a near match the model named) and never one that outranks the candidate (the
   person's own words > tool data > inferences); an answer that breaks this becomes an ADD (other
   subject) or a REJECT (outranked). Without a model (or when it fails) the same rules decide:
   same key -> UPDATE, else ADD.
The replacement is written in the same store operation that closes the old version.

Time: a fact's `valid_from` is when it was said (`Candidate.said_at`: the message's time), not
when it was reconciled, and an older statement never replaces or closes a newer live fact: it is
REJECTed ("older than what is known") and not stored, not even as history (history holds the
versions in the order they replaced each other). So replaying January after March, or a
consolidation that meets the sessions out of order, leaves March's fact live.

Audience (`bot.audience`): every fact carries who could read what it was said in, and the
candidate's place decides what it may see. A near duplicate only counts where it could be used
(a fact said in a DM is not known in a public channel): the same fact said in a wider place
widens it (a new version of the candidate's audience replaces it), said in a place that does not
see the other (two private channels) it is a second copy for that audience; closing or replacing
a fact closes its copies too. A replacement carries its candidate's audience. When the model
merges a replacement's text, words found only in facts the candidate's place may not use are
never carried over (the candidate's own words are kept instead), so nothing said in a DM or
private place reaches a wider audience through a merge.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from bot.audience import UNKNOWN_FACT, Audience, fact_audiences_for
from bot.keys import PersonKey, SessionKey
from bot.memory.fact_prompts import RECONCILE_SCHEMA, RECONCILE_SYSTEM, RECONCILE_TASK
from bot.memory.fact_rules import reject_reason
from bot.memory.similar import content_words, near_duplicate, related
from bot.memory.structured import JsonAsker
from bot.model import ModelError
from bot.stores.fact_common import clean_key
from bot.stores.ids import normalize_fact
from bot.stores.protocols import FactStore, StaleFact
from bot.stores.records import Fact, FactSource

log = logging.getLogger(__name__)

Outcome = Literal["ADD", "UPDATE", "DELETE", "NOOP", "REJECT"]
OUTCOMES: tuple[Outcome, ...] = ("ADD", "UPDATE", "DELETE", "NOOP", "REJECT")
RANK: dict[str, int] = {"user": 3, "tool": 2, "inferred": 1}
MAX_SHOWN = 40  # live facts shown to the model (same subject first, then the newest)


@dataclass(frozen=True)
class Candidate:
    text: str
    key: str | None = None
    source: FactSource = "user"
    explicit: bool = False  # the person asked the bot to remember it
    session: SessionKey | None = None
    source_ref: str | None = None
    source_messages: tuple[str, ...] = ()
    said_at: datetime | None = None  # when it was said (None: now)
    # Who could read what it was said in (a `bot.audience` id); the narrowest by default.
    audience: str = UNKNOWN_FACT

    def sees(self, fact: Fact) -> bool:
        """May a reply where this was said use `fact` (`bot.audience.fact_audiences_for`)?"""
        usable = fact_audiences_for(Audience.parse(self.audience))
        return usable is None or fact.audience in usable


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    fact: Fact | None = None  # the version written (ADD/UPDATE) or the one matched (NOOP)
    closed: Fact | None = None  # the version closed (UPDATE/DELETE)
    reason: str = ""
    tokens: int = 0  # model tokens spent deciding


@dataclass(frozen=True)
class _Verdict:
    outcome: Outcome
    target: Fact | None = None
    key: str | None = None
    text: str = ""
    reason: str = ""


class Reconciler:
    """Decides and applies; one instance per process (it serialises each person's updates)."""

    def __init__(self, facts: FactStore, asker: JsonAsker | None = None) -> None:
        self.facts = facts
        self.asker = asker
        self.counts: Counter[str] = Counter()
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def reconcile(self, person: PersonKey, candidate: Candidate) -> Decision:
        lock = self._locks.get(person.id)
        if lock is None:
            lock = self._locks[person.id] = asyncio.Lock()
        async with lock:
            for attempt in range(3):
                try:
                    decision = await self._once(person, candidate)
                    break
                except StaleFact:  # closed meanwhile (another process): decide again
                    if attempt == 2:
                        raise
        self.counts[decision.outcome] += 1
        log.info(
            "fact_reconciled",
            extra={
                "fields": {
                    "person": person.id,
                    "outcome": decision.outcome,
                    "reason": decision.reason,
                    "source": candidate.source,
                }
            },
        )
        return decision

    async def _once(self, person: PersonKey, cand: Candidate) -> Decision:
        text = " ".join(cand.text.split())
        if not text:
            return Decision("REJECT", reason="empty")
        if not cand.explicit:
            why = reject_reason(text)
            if why is not None:
                return Decision("REJECT", reason=why)
        live = await self.facts.list_facts(person)
        key = clean_key(cand.key)
        unseen: list[Fact] = []
        for fact in live:
            if not near_duplicate(text, fact.text):
                continue
            if not cand.sees(fact):
                unseen.append(fact)  # known, but not where this was said
                continue
            if RANK[cand.source] > RANK[fact.source] and fact.audience == cand.audience:
                # Said by the person now, inferred before: the same fact, better sourced.
                verdict = self._guarded(cand, _Verdict("UPDATE", fact, key, text))
                if verdict.outcome == "UPDATE":
                    return await self._apply(person, cand, verdict, live)
            return Decision("NOOP", fact=fact, reason="duplicate")
        if unseen:
            return await self._apply(
                person, cand, self._elsewhere(cand, text, key, unseen[0]), live
            )
        verdict, tokens = await self._decide(cand, text, key, live)
        decision = await self._apply(person, cand, verdict, live)
        return Decision(decision.outcome, decision.fact, decision.closed, decision.reason, tokens)

    @staticmethod
    def _elsewhere(cand: Candidate, text: str, key: str | None, known: Fact) -> _Verdict:
        """The fact is known for an audience that cannot be used where it was said now: widen
        it when that audience is narrower (a DM's, or a private channel's now said in public),
        else keep a copy for this audience (two private channels)."""
        was, now = Audience.parse(known.audience), Audience.parse(cand.audience)
        wider = was.kind == "dm" or now.public
        if wider and RANK[cand.source] >= RANK[known.source]:
            return _Verdict("UPDATE", known, key or known.key, text, "said where it was unknown")
        return _Verdict("ADD", None, key or known.key, text, "said in another place")

    async def _decide(
        self, cand: Candidate, text: str, key: str | None, live: list[Fact]
    ) -> tuple[_Verdict, int]:
        if self.asker is None or not live:
            return self._by_rules(cand, text, key, live), 0
        shown = sorted(live, key=lambda f: (f.key != key or key is None, -live.index(f)))
        shown = shown[:MAX_SHOWN]
        request = [
            {"role": "system", "content": RECONCILE_SYSTEM},
            {
                "role": "user",
                "content": json.dumps(
                    {
                        "new": {"text": text, "key": key or "", "source": cand.source},
                        "existing": [
                            {"id": f.id, "key": f.key or "", "text": f.text, "source": f.source}
                            for f in shown
                        ],
                    },
                    ensure_ascii=False,
                ),
            },
        ]
        try:
            answer = await self.asker.ask(request, RECONCILE_TASK, RECONCILE_SCHEMA)
        except (ModelError, ValueError) as exc:
            log.warning("fact_reconcile_model_failed", extra={"fields": {"error": str(exc)[:200]}})
            return self._by_rules(cand, text, key, live), 0
        hidden = [f for f in live if not cand.sees(f)]
        return self._check(cand, text, key, answer.data, shown, hidden), answer.tokens

    def _by_rules(self, cand: Candidate, text: str, key: str | None, live: list[Fact]) -> _Verdict:
        same = [f for f in live if key and f.key == key]
        if same:
            return self._guarded(cand, _Verdict("UPDATE", same[-1], key, text, "same key"))
        return _Verdict("ADD", None, key, text, "new subject")

    def _check(
        self,
        cand: Candidate,
        text: str,
        key: str | None,
        data: dict[str, object],
        shown: list[Fact],
        hidden: list[Fact],
    ) -> _Verdict:
        event = str(data.get("event", "")).upper()
        target = next((f for f in shown if f.id == str(data.get("target_id", "")).strip()), None)
        new_key = key or clean_key(str(data.get("key") or "")) or None
        new_text = " ".join(str(data.get("text") or "").split()) or text
        reason = str(data.get("reason") or "")[:200]
        if event == "REJECT":
            if cand.explicit:
                return _Verdict("ADD", None, new_key, text, "asked to remember")
            return _Verdict("REJECT", reason=reason or "not a durable fact")
        if event == "NOOP":
            if target is not None and not cand.sees(target):
                return _Verdict("ADD", None, new_key, text, "known only elsewhere")
            return _Verdict("NOOP", target, reason=reason or "already known")
        if event in ("UPDATE", "DELETE"):
            if target is None:
                return _Verdict("ADD", None, new_key, text, "no such live fact to replace")
            same_subject = (new_key is not None and target.key == new_key) or related(
                text, target.text
            )
            if not same_subject:
                return _Verdict("ADD", None, new_key, text, "other subject: not replaced")
            outcome: Outcome = "UPDATE" if event == "UPDATE" else "DELETE"
            merged_from = (text, target.text) if cand.sees(target) else (text,)
            if _carries_hidden(new_text, merged_from, hidden):
                new_text = text  # the merge drew on what may not be used here: their words
            verdict = _Verdict(outcome, target, new_key or target.key, new_text, reason)
            return self._guarded(cand, verdict)
        return _Verdict("ADD", None, new_key, text, reason or "new fact")

    @staticmethod
    def _guarded(cand: Candidate, verdict: _Verdict) -> _Verdict:
        """Never let tool data or an inference replace what outranks it, nor an older statement
        replace a newer one (a month consolidated at once, sessions in any order)."""
        target = verdict.target
        if target is not None and RANK[cand.source] < RANK[target.source]:
            return _Verdict("REJECT", target, reason=f"outranked by a {target.source} fact")
        if target is not None and cand.said_at is not None and cand.said_at < target.valid_from:
            return _Verdict("REJECT", target, reason="older than what is known")
        return verdict

    async def _apply(
        self, person: PersonKey, cand: Candidate, v: _Verdict, live: list[Fact]
    ) -> Decision:
        decision = await self._write(person, cand, v)
        if decision.closed is not None:
            await self._close_copies(person, cand, decision, live)
        return decision

    async def _close_copies(
        self, person: PersonKey, cand: Candidate, decision: Decision, live: list[Fact]
    ) -> None:
        """The closed fact's copies for other audiences (the same text said in other places)
        go with it, unless said after the candidate."""
        closed = decision.closed
        assert closed is not None
        kept = decision.fact.id if decision.fact is not None else None
        for copy in live:
            if copy.id in (closed.id, kept) or normalize_fact(copy.text) != normalize_fact(
                closed.text
            ):
                continue
            if cand.said_at is not None and cand.said_at < copy.valid_from:
                continue
            try:
                await self.facts.replace_fact(person, copy.id, None)
            except StaleFact:
                continue  # closed meanwhile

    async def _write(self, person: PersonKey, cand: Candidate, v: _Verdict) -> Decision:
        if v.outcome == "ADD":
            fact = await self.facts.add_fact(
                person,
                v.text,
                key=v.key,
                source=cand.source,
                session=cand.session,
                source_ref=cand.source_ref,
                source_messages=cand.source_messages,
                valid_from=cand.said_at,
                audience=cand.audience,
            )
            return Decision("ADD", fact=fact, reason=v.reason)
        if v.outcome == "UPDATE" and v.target is not None:
            new = await self.facts.replace_fact(
                person,
                v.target.id,
                v.text,
                key=v.key,
                source=cand.source,
                session=cand.session,
                source_ref=cand.source_ref,
                source_messages=cand.source_messages,
                # Never before the version it closes (a fact widened by an older statement).
                valid_from=max(cand.said_at, v.target.valid_from) if cand.said_at else None,
                audience=cand.audience,
            )
            return Decision("UPDATE", fact=new, closed=v.target, reason=v.reason)
        if v.outcome == "DELETE" and v.target is not None:
            await self.facts.replace_fact(person, v.target.id, None)
            return Decision("DELETE", closed=v.target, reason=v.reason)
        if v.outcome == "NOOP":
            return Decision("NOOP", fact=v.target, reason=v.reason)
        return Decision("REJECT", reason=v.reason)


def _carries_hidden(merged: str, sources: tuple[str, ...], hidden: list[Fact]) -> bool:
    """Does a merged text hold a word found only in facts the candidate's place may not use?"""
    if not hidden:
        return False
    own: set[str] = set()
    for text in sources:
        own |= content_words(text)
    extra = content_words(merged) - own
    return any(extra & content_words(f.text) for f in hidden)
