"""`/memory forget all`: erase everything the bot holds about one person, in every tier, and keep
a receipt. In a DM scope (`bot.memory.speaker_facts`), where every fact of the person on the
platform is used and shown, it erases them in every scope of the platform (`forget_on_platform`).

Tiers: the person's facts (every version), their turns in stored conversations (their messages
and what the bot did and said in answer: tool calls, results, replies), the messages of theirs
the bot heard where it is (`bot.memory.heard`, counted with their messages; quotes of them cut
from other bots' records there), the raw tool-call logs of those turns, summary text and
pinned facts drawn from them (dropped, not regenerated: a summary
mixes everyone's turns and cannot be edited reliably; later folds start a new one), long-term
memory index entries and their vectors (see `MemoryTiers`), and cached state (hot session
copies). SQLite files are then compacted (secure_delete + WAL truncated), so the
text is gone from the files too, which `bot memory audit` checks.

Turns, summaries and the nightly consolidation run concurrently with this, so each affected
session is scrubbed under its session lock (a turn in flight there finishes first and its hot
copy is dropped after it), its `erasures` counter is bumped (a summary or a consolidation that
read the session before refuses to write what it made from it), and a second pass erases
whatever such in-flight work stored meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.copies import WordCutter
from bot.memory.render import PRIVATE_TOOLS, RECALLED, RECALLED_FROM, RECALLED_IDS, RECALLED_TOKENS
from bot.memory.tombstones import tombstone_of
from bot.stores import codec
from bot.stores.ids import canonical_fact_id
from bot.stores.protocols import ErasureStore
from bot.stores.records import ErasureReceipt, Fact, SessionState, StoredMessage
from bot.textfold import CUT_MARK, contains, cut, fold, spans

log = logging.getLogger(__name__)
PAGE = 500  # messages read at once when scanning a team
TURN_WINDOW = 200  # messages after a turn's first one searched for the rest of that turn


@dataclass(frozen=True)
class ErasureCounts:
    facts: int = 0  # fact versions
    messages: int = 0
    tool_calls: int = 0
    summaries: int = 0
    memories: int = 0  # long-term memory index entries (with their vectors)
    copies: int = 0  # other records that quoted the person, their words cut out (rest kept)


@dataclass(frozen=True)
class PlatformErasure:
    """What `forget_on_platform` erased: totals, the scopes that held something, and one
    receipt per scope erased (the asking person's first)."""

    counts: ErasureCounts
    scopes: list[PersonKey]
    receipts: list[ErasureReceipt]


class MemoryTiers(Protocol):
    """Long-term memory beyond the durable store (the episodic index), erased per person."""

    async def erase_person(self, person: PersonKey) -> int:
        """Delete what this person took part in; returns how many entries went."""

    async def compact(self) -> None: ...


class HeardTier(Protocol):
    """The record of messages heard where the bot is (`bot.memory.heard.Hearing`)."""

    async def words_of(self, person: PersonKey) -> list[str]: ...

    async def erase_person(self, person: PersonKey) -> int: ...

    async def cut_words(self, team: TeamKey, cutter: WordCutter) -> int: ...

    async def compact(self) -> None: ...


LockSession = Callable[[SessionKey], AbstractAsyncContextManager[None]]


class Eraser:
    def __init__(
        self,
        store: ErasureStore,
        *,
        lock_session: LockSession | None = None,
        on_erased: Callable[[list[str]], Awaitable[None]] | None = None,
        tiers: list[MemoryTiers] | None = None,
    ) -> None:
        self.store = store
        self.lock_session = lock_session  # the turns' per-session lock
        self.on_erased = on_erased  # drops hot caches of sessions whose data changed
        self.tiers = tiers or []
        # Messages heard where the bot is: the person's records are erased with their messages
        # (counted with them), quotes of them cut from other bots' records.
        self.heard: HeardTier | None = None

    async def forget_all(self, person: PersonKey, *, requested_by: str = "") -> ErasureReceipt:
        """Erase this one person key (one team/guild, or one DM scope) and keep a receipt."""
        started, at = time.perf_counter(), codec.now_ms()
        counts = await self._erase(person)
        await self._compact()
        return await self._receipt(person, counts, at, requested_by, _ms(started))

    async def forget_fact(self, person: PersonKey, fact_id: str) -> bool:
        """Erase one fact (with the older versions it replaced) and its copies: the `remember`
        call and result of the turn that stored it (from the history and the tool-call log),
        its words in that turn's messages and wherever the bot repeated it (replies,
        summaries, index entries); a tombstone keeps the consolidation from making it again.
        False if the person has no such fact."""
        wanted = canonical_fact_id(fact_id)
        versions = {f.id: f for f in await self.store.list_facts(person, history=True)}
        chain: list[Fact] = []
        stack = [wanted]
        while stack:
            fact = versions.get(stack.pop())
            if fact is not None and fact not in chain:
                chain.append(fact)
                stack.extend(fact.replaces)
        if not await self.store.delete_fact(person, fact_id):
            return False
        await self.store.add_tombstones([tombstone_of(f) for f in chain])
        cutter = WordCutter.of(f.text for f in chain)
        turns = frozenset(f.source_ref for f in chain if f.source_ref)
        for fact in chain:
            if fact.session and fact.source_ref:
                with contextlib.suppress(ValueError):
                    await self._drop_remember_calls(SessionKey.parse(fact.session), fact, cutter)
        copies = await self._cut_copies(person.team_key, cutter, turns=turns)
        for session_id in sorted(copies.sessions):
            key = SessionKey.parse(session_id)
            async with self._locked(key):
                await self._scrub_session(key, None, cutter, spoke=False)
                if self.on_erased is not None:
                    await self.on_erased([session_id])
        await self._cut_summaries(person.team_key, cutter, skip=copies.sessions)
        await self._cut_tiers(person.team_key, cutter, copies.sessions)
        await self._compact()
        return True

    async def _drop_remember_calls(
        self, session: SessionKey, fact: Fact, cutter: WordCutter
    ) -> None:
        """The `remember` calls of the fact's turn that stored it (those whose arguments hold
        the fact's text or a quote of it), their results and logs; the fact's text cut from what
        is left of that turn (the person's message, the bot's reply) wherever it stands
        verbatim, however common its words (it is the fact they asked to forget)."""
        seqs = [int(ref.rsplit("#", 1)[1]) for ref in fact.source_messages if "#" in ref]
        start = min(seqs, default=1)
        async with self._locked(session):
            window = await self.store.between(
                session, after_seq=max(start - 1, 0), upto_seq=start + TURN_WINDOW
            )
            turn = [m for m in window if m.turn_id == fact.source_ref]
            dropped_calls: set[str] = set()
            rewrites: list[StoredMessage] = []
            gone: list[int] = []
            for m in turn:
                if not m.tool_calls:
                    continue
                keep = []
                for call in m.tool_calls:
                    function = call.get("function") or {}
                    arguments = str(function.get("arguments", ""))
                    if function.get("name") in PRIVATE_TOOLS and (
                        cutter.spans(arguments) or contains(arguments, fact.text)
                    ):
                        dropped_calls.add(str(call.get("id")))
                    else:
                        keep.append(call)
                if len(keep) == len(m.tool_calls):
                    continue
                if keep or m.content.strip():
                    rewrites.append(m.model_copy(update={"tool_calls": keep or None}))
                else:
                    gone.append(m.seq)
            logs = [
                str(m.meta.get("call_id"))
                for m in turn
                if m.role == "tool" and m.tool_call_id in dropped_calls
            ]
            gone += [m.seq for m in turn if m.role == "tool" and m.tool_call_id in dropped_calls]
            rewritten = {m.seq: m for m in rewrites}
            for m in turn:
                if m.seq in gone:
                    continue
                current = rewritten.get(m.seq, m)
                ranges = spans(current.content, [fact.text])
                if ranges:
                    rewritten[m.seq] = current.model_copy(
                        update={"content": cut(current.content, ranges), "tokens": 0}
                    )
            rewrites = list(rewritten.values())
            if rewrites:
                await self.store.rewrite_messages(rewrites)
            if gone:
                await self.store.delete_messages(session, gone)
            if logs:
                await self.store.delete_tool_calls(session, logs)
            if self.on_erased is not None:
                await self.on_erased([session.id])

    async def forget_on_platform(
        self, person: PersonKey, *, requested_by: str = ""
    ) -> PlatformErasure:
        """Erase this person's user in every scope of the platform: the DM scope and every
        team/guild. The scopes are those where the user has facts, plus every team with a
        conversation on the platform (whatever else the bot holds about a person was said in a
        conversation, and the store keeps every session's head even after its messages are
        pruned); a scope where they hold nothing costs one pass of index lookups. One receipt per
        scope that held something, and always one for `person`."""
        at = codec.now_ms()
        erased: list[tuple[PersonKey, ErasureCounts, float]] = []
        for scope in await self._scopes(person):
            started = time.perf_counter()
            counts = await self._erase(scope, once_if_empty=scope != person)
            if scope == person or any(asdict(counts).values()):
                erased.append((scope, counts, _ms(started)))
        await self._compact()
        receipts = [
            await self._receipt(scope, counts, at, requested_by, ms) for scope, counts, ms in erased
        ]
        total = ErasureCounts(
            **{f: sum(asdict(c)[f] for _, c, _ in erased) for f in asdict(ErasureCounts())}
        )
        held = [scope for scope, counts, _ in erased if any(asdict(counts).values())]
        return PlatformErasure(counts=total, scopes=held, receipts=receipts)

    async def _scopes(self, person: PersonKey) -> list[PersonKey]:
        found: set[PersonKey] = set()
        for fact in await self.store.list_user_facts(person, history=True):
            with contextlib.suppress(ValueError):
                found.add(PersonKey.parse(fact.person))
        for session_id in await self.store.session_heads():
            with contextlib.suppress(ValueError):
                key = SessionKey.parse(session_id)
                if key.platform == person.platform:
                    found.add(PersonKey(person.platform, key.team, person.user))
        found.discard(person)
        return [person, *sorted(found, key=lambda p: p.id)]

    async def _erase(self, person: PersonKey, *, once_if_empty: bool = False) -> ErasureCounts:
        """Every tier, twice (the second pass takes what in-flight work stored meanwhile);
        `once_if_empty`: a scope where the first pass found nothing is not passed again (a turn
        of theirs starting there now is no different from one just after the erasure)."""
        facts = messages = calls = summaries = memories = cut = 0
        scrubbed: set[str] = set()
        cutter = await self._words_of(person)
        for _pass in range(2):
            sessions = await self.store.sessions_of_speaker(person)
            facts += await self.store.delete_all_facts(person)
            await self.store.delete_tombstones(person)
            messages += await self.store.delete_speaker(person)
            if self.heard is not None:
                messages += await self.heard.erase_person(person)
            calls += await self.store.delete_speaker_calls(person)
            for tier in self.tiers:
                memories += await tier.erase_person(person)
            if once_if_empty and not (sessions or facts or messages or calls or memories):
                break
            copies = await self._cut_copies(person.team_key, cutter, skip_speaker=person.id)
            cut += copies.records
            changed = [s for s in [*sessions, *sorted(copies.sessions)] if s not in scrubbed]
            for session_id in dict.fromkeys(changed):
                try:
                    key = SessionKey.parse(session_id)
                except ValueError:
                    continue
                scrubbed.add(session_id)
                async with self._locked(key):
                    summaries += await self._scrub_session(
                        key, person, cutter, spoke=session_id in sessions
                    )
                    if self.on_erased is not None:
                        await self.on_erased([session_id])
            summaries += await self._cut_summaries(
                person.team_key, cutter, skip=scrubbed, person=person
            )
            cut += await self._cut_tiers(person.team_key, cutter, scrubbed)
        return ErasureCounts(facts, messages, calls, summaries, memories, cut)

    async def _words_of(self, person: PersonKey) -> WordCutter:
        """What the person said (their messages, the facts they stated, what they asked to be
        remembered), read before anything is deleted: the quotes to cut from other records."""
        cutter = WordCutter()
        for fact in await self.store.list_facts(person, history=True):
            cutter.add(fact.text)
        cursor = ("", 0)
        while page := await self.store.team_messages(person.team_key, after=cursor, limit=PAGE):
            cursor = (page[-1].session, page[-1].seq)
            for m in page:
                if m.speaker != person.id:
                    continue
                if m.role == "user" and not m.from_tool:
                    cutter.add(m.content)
                for call in m.tool_calls or ():
                    if call.get("function", {}).get("name") in PRIVATE_TOOLS:
                        cutter.add(_argument_text(call.get("function", {}).get("arguments")))
            await asyncio.sleep(0)  # a long scan yields to the turns people wait on
        if self.heard is not None:
            for text in await self.heard.words_of(person):
                cutter.add(text)
        return cutter

    async def _cut_copies(
        self,
        team: TeamKey,
        cutter: WordCutter,
        *,
        skip_speaker: str | None = None,
        turns: frozenset[str] = frozenset(),
    ) -> CutReport:
        """Cut the quotes out of every other stored message of the team (their text, the
        tool-call arguments, the memories recalled with them) and out of tool-call logs. A
        session's messages are rewritten under its lock, its hot copy dropped after."""
        report = CutReport()
        if not cutter:
            return report

        def own_words(m: StoredMessage) -> bool:
            return m.role == "user" and not m.from_tool and m.turn_id not in turns

        cursor = ("", 0)
        said: dict[str, list[str]] = {}  # per session: what its other people typed there
        while page := await self.store.team_messages(team, after=cursor, limit=PAGE):
            cursor = (page[-1].session, page[-1].seq)
            edits: dict[str, set[int]] = {}
            for m in page:
                if skip_speaker is not None and m.speaker == skip_speaker:
                    continue
                theirs = said.setdefault(m.session, [])
                if own_words(m) and m.speaker != skip_speaker:
                    theirs.append(fold(m.content))
                if cut_message(m, cutter, skip_speaker, keep_text=own_words(m), theirs=theirs):
                    edits.setdefault(m.session, set()).add(m.seq)
            for session_id, seqs in edits.items():
                key = SessionKey.parse(session_id)
                keep = said.get(session_id, [])
                async with self._locked(key):
                    # Read again under the lock: a platform delete or another erasure may have
                    # rewritten these messages since the page was read.
                    current = await self.store.between(
                        key, after_seq=min(seqs) - 1, upto_seq=max(seqs)
                    )
                    fresh = [
                        edited
                        for m in current
                        if m.seq in seqs
                        and (
                            edited := cut_message(
                                m, cutter, skip_speaker, keep_text=own_words(m), theirs=keep
                            )
                        )
                        is not None
                    ]
                    report.records += await self.store.rewrite_messages(fresh)
                    if self.on_erased is not None:
                        await self.on_erased([session_id])
                report.sessions.add(session_id)
            await asyncio.sleep(0)
        for call in await self.store.team_tool_calls(team):
            if skip_speaker is not None and call.speaker == skip_speaker:
                continue
            arguments = cutter.cut(call.arguments)
            if arguments != call.arguments:
                call.arguments = arguments
                report.records += int(await self.store.rewrite_tool_call(call))
        return report

    async def _cut_summaries(
        self,
        team: TeamKey,
        cutter: WordCutter,
        *,
        skip: set[str],
        person: PersonKey | None = None,
    ) -> int:
        """Summaries and pinned facts of the team's other sessions that quote the person (cut),
        or that drew on memories of theirs recalled there (`summary_speakers`: dropped and
        rebuilt, since a summary paraphrases)."""
        cut = 0
        for session_id in await self.store.session_heads():
            if session_id in skip or not session_id.startswith(team.id + ":"):
                continue
            try:
                key = SessionKey.parse(session_id)
            except ValueError:
                continue
            state = await self.store.get_state(key)
            if state is None or not (state.summary or state.pinned):
                continue
            drew = person is not None and person.id in state.summary_speakers
            if (
                drew
                or cutter.spans(state.summary)
                or any(cutter.spans(p.text) for p in state.pinned)
            ):
                async with self._locked(key):
                    cut += await self._scrub_session(
                        key, person if drew else None, cutter, spoke=False
                    )
                    if self.on_erased is not None:
                        await self.on_erased([session_id])
        return cut

    async def _cut_tiers(self, team: TeamKey, cutter: WordCutter, sessions: set[str]) -> int:
        cut = await self.heard.cut_words(team, cutter) if self.heard is not None else 0
        for tier in self.tiers:
            if isinstance(tier, CopyTier):
                cut += await tier.cut_words(team, cutter, sorted(sessions))
        return cut

    async def _compact(self) -> None:
        await self.store.compact()
        if self.heard is not None:
            await self.heard.compact()
        for tier in self.tiers:
            await tier.compact()

    async def _receipt(
        self,
        person: PersonKey,
        counts: ErasureCounts,
        at: datetime,
        requested_by: str,
        duration_ms: float,
    ) -> ErasureReceipt:
        receipt = ErasureReceipt(
            id="r" + secrets.token_hex(6),
            person=person.id,
            requested_by=requested_by,
            requested_at=at,
            finished_at=codec.now_ms(),
            counts=asdict(counts),
            created_at=at,
        )
        await self.store.add_receipt(receipt)
        log.info(
            "memory_erased",
            extra={
                "fields": {
                    "person": person.id,
                    "receipt": receipt.id,
                    **receipt.counts,
                    "duration_ms": duration_ms,
                }
            },
        )
        return receipt

    def _locked(self, session: SessionKey) -> AbstractAsyncContextManager[None]:
        return self.lock_session(session) if self.lock_session else contextlib.nullcontext()

    async def _scrub_session(
        self, key: SessionKey, person: PersonKey | None, cutter: WordCutter, *, spoke: bool
    ) -> int:
        """Bump the erasure counter and drop the saved consolidation work (re-extracted from
        what is left). A summary that drew on the person (`spoke` there, or named as a summary
        speaker) is dropped and rebuilt: `summary_upto_seq` goes back to 0 so the next fold
        summarises the messages as they now are. Elsewhere their quotes are cut from the
        summary and the pinned facts, the rest kept. 1 if a summary changed."""
        pid = person.id if person is not None else None
        for _ in range(5):  # optimistic concurrency: re-read on conflict
            state = await self.store.get_state(key) or SessionState(session=key.id)
            state.erasures += 1
            state.consolidation = None  # may hold their words: extracted again without them
            drew = pid is not None and (spoke or pid in state.summary_speakers)
            changed = False
            if drew and state.summary:
                state.summary, state.summary_speakers, changed = "", [], True
                state.summary_upto_seq = 0
            elif state.summary:
                summary = cutter.cut(state.summary)
                changed = summary != state.summary
                state.summary = summary
            pinned = [
                p.model_copy(update={"text": cutter.cut(p.text)})
                for p in state.pinned
                if pid is None or p.speaker not in ("", pid)
            ]
            pinned = [p for p in pinned if p.text.strip() and p.text.strip() != CUT_MARK]
            if [p.text for p in pinned] != [p.text for p in state.pinned]:
                state.pinned, changed = pinned, True
            if await self.store.put_state(key, state):
                return int(changed)
        raise RuntimeError(f"session state of {key.id} kept changing during an erasure")


@dataclass
class CutReport:
    records: int = 0  # messages and tool-call logs rewritten
    sessions: set[str] = field(default_factory=set)  # sessions whose messages changed


@runtime_checkable
class CopyTier(Protocol):
    """A tier whose records may quote a person (the memory index): cut the quotes, and rebuild
    what was drawn from `sessions` (their messages changed)."""

    async def cut_words(self, team: TeamKey, cutter: WordCutter, sessions: list[str]) -> int: ...


def cut_message(
    m: StoredMessage,
    cutter: WordCutter,
    skip_speaker: str | None,
    *,
    keep_text: bool,
    theirs: Sequence[str] = (),
) -> StoredMessage | None:
    """`m` with the quotes cut (its text unless `keep_text`: a person's own words stay theirs;
    the model's tool-call arguments; memories recalled with it: dropped whole when they drew
    on the person, else cut); None when nothing changed. `theirs`: the folded words the other
    people of its conversation said there themselves, never cut from it (`WordCutter.cut`)."""
    update: dict[str, Any] = {}
    if not keep_text:
        content = cutter.cut(m.content, theirs=theirs)
        if content != m.content:
            update["content"], update["tokens"] = content, 0
    if m.tool_calls:
        calls = [
            {
                **c,
                "function": {**c["function"], "arguments": cutter.cut(c["function"]["arguments"])},
            }
            if isinstance(c.get("function"), dict)
            and isinstance(c["function"].get("arguments"), str)
            else c
            for c in m.tool_calls
        ]
        if calls != m.tool_calls:
            update["tool_calls"] = calls
    recalled = m.meta.get(RECALLED)
    if isinstance(recalled, str) and recalled:
        meta = dict(m.meta)
        drew = skip_speaker is not None and skip_speaker in (meta.get(RECALLED_FROM) or ())
        text = "" if drew else cutter.cut(recalled)
        if text != recalled:
            if drew or not text.strip():
                for k in (RECALLED, RECALLED_FROM, RECALLED_TOKENS, RECALLED_IDS):
                    meta.pop(k, None)
            else:
                meta[RECALLED] = text
            update["meta"] = meta
    return m.model_copy(update=update) if update else None


def _argument_text(raw: object) -> str:
    """The words of a tool call's JSON arguments (the fact a `remember` call was given), one
    value a line; the raw text when it is not a JSON object."""
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return "\n".join(str(v) for v in parsed.values() if isinstance(v, str))
    return str(raw or "")


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


def counts_of(receipt: ErasureReceipt) -> ErasureCounts:
    return ErasureCounts(**{k: int(v) for k, v in receipt.counts.items()})
