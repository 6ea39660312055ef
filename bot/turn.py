"""The turn: one incoming message in, one reply out, with tool calls in between.

Loop: build the context -> ask the model -> if it asked for tools, run them (in parallel, through
the executor), feed each result back as a `tool` message tied to its `tool_call_id`, repeat.
Stops on a final answer; on `max_rounds` (then one last request with tool_choice="none" asking for
an answer from what it has); or on an unrecoverable model error (then a friendly apology).
Every step is written to session memory as it happens (user message, tool calls, results, reply).

`TurnRunner._run` reads as the turn's story, one named step each (load, prepare_tools,
recall_memories, take_files, record_request, then model_round / tool_round until finish); each
step takes what the ones before it gathered (`Turn`, then the request's `Exchange`) and is tested
alone in tests/core/test_turn_steps.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot import tracing
from bot.approvals.desk import ApprovalDesk, Resume, declined_record
from bot.audience import META_AUDIENCE
from bot.connections.base import answered_by_a_sign_in_link
from bot.feedback import META_MODEL, ReplyRef, offer_feedback
from bot.files.intake import FileLimits
from bot.files.prepare import FileInput, prepare_files
from bot.files.vision import Vision
from bot.memory.context import ContextBuilder, MemoryView
from bot.memory.episodic.excerpts import message_meta
from bot.memory.heard import Earlier
from bot.memory.off_record import off_meta
from bot.memory.prompts import FINAL_ANSWER_NOTE
from bot.memory.render import (
    PRIVATE_TOOLS,
    RECALLED,
    RECALLED_FROM,
    RECALLED_IDS,
    RECALLED_TOKENS,
)
from bot.memory.resume import PriorTurn, find_prior_turn
from bot.memory.session import HotSession, SessionMemory
from bot.memory.speaker_facts import facts_for
from bot.memory.speakers import said_by, shared_place
from bot.messages import IncomingMessage, ReplySink
from bot.model import ModelError, ModelResponse
from bot.policy import DEFAULT_POLICY, PlacePolicy
from bot.stores.approvals import Approval
from bot.stores.protocols import FactStore, StoreUnavailable
from bot.stores.records import Fact, NewMessage, StoredMessage
from bot.write_guard import WriteGuard
from tools.registry import ToolRegistry
from tools.types import ToolCallRecord, ToolCallRequest, ToolContext

log = logging.getLogger(__name__)

FILE_SHARE = 0.6  # of the current turn's room that shared files may fill

EMPTY_REPLY = "I don't have an answer to that — could you rephrase?"
TIMEOUT_REPLY = "Sorry, that took too long and I had to stop. Please try again."
INTERNAL_ERROR_REPLY = "Sorry, something went wrong on my side. Please try again."
# Refused calls (over the per-response/per-turn cap) kept in the conversation, each with its
# `limit_exceeded` result; calls past these are left out entirely, so a response asking for
# thousands of calls costs a bounded number of messages and tokens.
REFUSED_CALLS_SHOWN = 3
WAITING_REPLY = "That request was decided; I'll go on with it in a moment."
RESUME_LOST_REPLY = (
    "I can't find where that conversation stopped any more, so I couldn't go on with it. "
    "Please ask again."
)
STORE_DOWN_REPLY = (
    "Sorry, I can't reach my memory store right now, so I couldn't take this message in. "
    "Please send it again in a minute."
)


class Model(Protocol):
    """What the turn needs of a model: `bot.model.ModelClient`, or a stand-in in benchmarks."""

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = ...,
        on_delta: Any = ...,
        response_format: dict[str, Any] | None = ...,
        max_tokens: int | None = ...,
        temperature: float | None = ...,
        tool_choice: str | None = ...,
        model: str | None = ...,
    ) -> ModelResponse: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Recalled:
    """Memories recalled for a message: their text ("" for none) and whose words they are."""

    text: str = ""
    people: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # index entry ids


class Recall(Protocol):
    """Long-term memories for a message (`bot.memory.episodic.service.EpisodicMemory.recall`):
    at most `tokens` tokens of text. Never raises."""

    async def __call__(
        self, msg: IncomingMessage, history: Sequence[StoredMessage], tokens: int
    ) -> Recalled: ...


class Heard(Protocol):
    """The earlier messages of a message's place, from the record of what the bot heard there
    (`bot.memory.heard.Hearing.earlier`). Never raises."""

    async def __call__(self, msg: IncomingMessage, history: Sequence[StoredMessage]) -> Earlier: ...


class Toolbox(Protocol):
    """The tools offered in one turn (built-ins + the team's installed packs)."""

    registry: ToolRegistry  # which tools write (bot.write_guard) and which only read

    def schemas(self) -> list[dict[str, Any]]: ...

    def notes(self) -> list[str]:
        """Installed tools missing this turn (their server is down), said to the model."""
        ...

    async def prepare(self, text: str, earlier: list[str], used: set[str]) -> None:
        """Choose the tools to offer for this message (all of them unless there are many)."""
        ...

    def call_allowance(self, prior_calls: int) -> int: ...

    async def run(
        self, calls: list[ToolCallRequest], ctx: ToolContext, *, prior_calls: int = 0
    ) -> list[ToolCallRecord]: ...


@dataclass
class TurnResult:
    turn_id: str
    reply: str
    outcome: (
        str  # "answer" | "max_rounds" | "replayed" | "budget" | "model_error" | "timeout"
        # | "store_unavailable" | "error" | "awaiting_approval"
    )
    rounds: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    request_tokens: list[int] = field(default_factory=list)
    duration_ms: float = 0.0
    needs_compression: bool = False
    user_seq: int = 0  # seq of the person's message it answered (feedback buttons point at it)
    approvals: list[Approval] = field(default_factory=list)  # calls waiting for the person


@dataclass
class Turn:
    """What one turn has gathered so far, handed from step to step (`TurnRunner._run`)."""

    policy: PlacePolicy  # this place's settings, resolved once for the turn
    place_note: str  # what the model is told about the place (`PlacePolicy.place_note`)
    msg: IncomingMessage
    toolbox: Toolbox
    sink: ReplySink
    result: TurnResult
    hot: HotSession
    facts: list[Fact]
    history: list[StoredMessage]
    prior: PriorTurn | None = None
    recalled: Recalled = field(default_factory=Recalled)
    said_before: Earlier = field(default_factory=Earlier)  # the place's earlier messages
    schemas: list[dict[str, Any]] = field(default_factory=list)
    tools_tokens: int = 0
    tools_rejected: bool = False  # the server refused function tools: none offered again
    files: FileInput | None = None
    named: bool = False  # several people talk here: messages say who said them
    hold: BudgetHold | None = None  # this place's budgets (bot.usage.gate); None: none apply
    builder: ContextBuilder | None = None  # set by `load`: the runner's, or the lean one


class ShowsApprovals(Protocol):
    """A sink that can show the person an approval request (the console: a line answered with
    `/approve` or `/deny`); it returns the text the turn finishes with. Calls wait for approval
    only where the sink can show one: a surface without it runs them as before."""

    async def ask_approval(self, approvals: list[Approval]) -> str: ...


class BudgetHold(Protocol):
    """A turn's budgets (`bot.usage.gate.Hold`): whether it runs lean, and the reservation
    of its first request's cost (a refusal line when a budget is used up)."""

    lean: bool

    async def reserve(self, prompt_tokens: int, max_completion: int) -> str | None: ...


class BudgetRefused(Exception):
    """The first request's reservation found a budget used up (by concurrent turns)."""

    def __init__(self, line: str) -> None:
        super().__init__("budget used up")
        self.line = line


@dataclass
class Exchange:
    """The request being built up round by round (`TurnRunner.record_request` makes it): what
    memory contributes, this turn's messages so far, who the tools act for, the write guard."""

    view: MemoryView
    current: list[dict[str, Any]]
    ctx: ToolContext
    guard: WriteGuard


def as_sent(msg: IncomingMessage, *, named: bool) -> str:
    """The person's words as the model gets them: with their name where several people talk
    (`bot.memory.speakers`), as history renders them in the same request."""
    return said_by(msg.text, msg.user_name, msg.person.id) if named else msg.text


def several_speak(msg: IncomingMessage, history: Sequence[StoredMessage]) -> bool:
    """A shared place whose conversation (as the model will see it) has more than one person:
    then names matter, and cost a few tokens a message; with one person they would not."""
    if not shared_place(msg.audience.id):
        return False
    person = msg.person.id
    return any(m.role == "user" and m.speaker != person for m in history)


async def _no_facts() -> list[Fact]:
    return []


class TurnRunner:
    def __init__(
        self,
        *,
        model: Model,
        memory: SessionMemory,
        facts: FactStore,
        builder: ContextBuilder,
        max_rounds: int,
        turn_timeout: float,
        file_limits: FileLimits | None = None,
        vision: Vision | None = None,
        recall: Recall | None = None,
        heard: Heard | None = None,
        default_model: str = "",
    ) -> None:
        self.default_model = default_model  # named on the reply's record (feedback by model)
        self.feedback = False  # replies carry feedback buttons (`bot.feedback`)
        # Calls that wait for the person's approval (`bot.approvals`); None: every call runs.
        self.approvals: ApprovalDesk | None = None
        self.recall = recall
        self.heard = heard
        self.model = model
        self.memory = memory
        self.facts = facts
        self.builder = builder
        # At 80 % of a budget a turn runs lean: half the context, no recall.
        self.lean_builder = builder.lean()
        self.max_rounds = max_rounds
        self.turn_timeout = turn_timeout
        self.file_limits = file_limits or FileLimits()
        self.vision = vision or Vision("off", "")

    async def run(
        self,
        msg: IncomingMessage,
        toolbox: Toolbox,
        sink: ReplySink,
        policy: PlacePolicy = DEFAULT_POLICY,
        hold: BudgetHold | None = None,
        resume: Resume | None = None,
    ) -> TurnResult:
        """One turn for `msg` in a place whose `policy` (`bot.policy`, resolved once for this
        turn) says the instructions, model and memory use; `toolbox` holds the tools it allows;
        `hold` the budgets that apply here; `resume` a turn paused for approvals, now decided."""
        with tracing.span("turn", {"session": msg.session.id, "platform": msg.platform}) as current:
            result = await self._traced(msg, toolbox, sink, policy, hold, resume)
            tracing.set_attributes(
                current,
                {
                    "turn_id": result.turn_id,
                    "outcome": result.outcome,
                    "rounds": result.rounds,
                    "tool_calls": len(result.tool_calls),
                },
            )
            trace = tracing.trace_id(current)
        fields: dict[str, Any] = {
            "turn_id": result.turn_id,
            "session": msg.session.id,
            "outcome": result.outcome,
            "rounds": result.rounds,
            "tool_calls": len(result.tool_calls),
            "duration_ms": result.duration_ms,
            "max_request_tokens": max(result.request_tokens, default=0),
        }
        if trace is not None:
            fields["trace_id"] = trace
        log.info("turn", extra={"fields": fields})
        return result

    async def _traced(
        self,
        msg: IncomingMessage,
        toolbox: Toolbox,
        sink: ReplySink,
        policy: PlacePolicy,
        hold: BudgetHold | None = None,
        resume: Resume | None = None,
    ) -> TurnResult:
        started = time.perf_counter()
        result = TurnResult(turn_id="t_" + uuid.uuid4().hex[:16], reply="", outcome="error")
        try:
            async with asyncio.timeout(self.turn_timeout):
                await self._run(msg, toolbox, sink, result, policy, hold, resume)
        except TimeoutError:
            result.outcome, result.reply = "timeout", TIMEOUT_REPLY
        except StoreUnavailable:
            result.outcome, result.reply = "store_unavailable", STORE_DOWN_REPLY
            log.warning("turn_store_unavailable", extra={"fields": {"turn_id": result.turn_id}})
        except ModelError as err:
            result.outcome, result.reply = "model_error", err.user_message
            log.warning(
                "turn_model_error",
                extra={"fields": {"turn_id": result.turn_id, "kind": err.kind}},
            )
        except Exception:
            log.exception("turn_failed", extra={"fields": {"turn_id": result.turn_id}})
            result.outcome, result.reply = "error", INTERNAL_ERROR_REPLY
        result.duration_ms = round((time.perf_counter() - started) * 1000, 1)
        failed = result.outcome in {"model_error", "timeout", "error", "store_unavailable"}
        # A budget's refusal, or a request for approval, is not an answer to rate.
        rated = result.outcome not in {"budget", "awaiting_approval"}
        if self.feedback and not failed and rated and result.user_seq:
            offer_feedback(sink, ReplyRef(msg.session, result.turn_id, result.user_seq))
        try:
            await sink.finish(result.reply, error=failed)
        except Exception:
            log.exception("sink_finish_failed", extra={"fields": {"turn_id": result.turn_id}})
        return result

    async def _run(
        self,
        msg: IncomingMessage,
        toolbox: Toolbox,
        sink: ReplySink,
        result: TurnResult,
        policy: PlacePolicy,
        hold: BudgetHold | None = None,
        resume: Resume | None = None,
    ) -> None:
        """The turn's story: load what is known, recall, take in the files, record the request,
        then model rounds (with tool rounds between them) until an answer is recorded, or a
        call waits for the person's approval (the turn resumes from there once decided)."""
        await sink.working()
        turn = await self.load(msg, toolbox, sink, result, policy, resume)
        if turn is None:  # answered before (a re-delivery): the stored reply is sent again
            return
        if resume is not None:
            if turn.prior is None:
                result.outcome, result.reply = "error", RESUME_LOST_REPLY
                return
            await self.settle_approvals(turn, resume)
        elif turn.prior is not None and await self._still_paused(turn):
            return
        turn.hold = hold
        turn.builder = self.lean_builder if hold is not None and hold.lean else self.builder
        await self.prepare_tools(turn)
        await self.recall_memories(turn)
        await self.take_files(turn)
        ex = await self.record_request(turn)
        for round_no in range(1, self.max_rounds + 2):
            final_round = round_no > self.max_rounds
            try:
                response = await self.model_round(turn, ex, round_no, final_round=final_round)
            except BudgetRefused as refused:  # recorded as the answer: the person was told
                await self.finish(turn, ex, ModelResponse(content=refused.line), final_round=False)
                result.outcome = "budget"
                break
            if response.tool_calls and not final_round:
                await self.tool_round(turn, ex, response)
                if result.outcome == "awaiting_approval":
                    break
                continue
            await self.finish(turn, ex, response, final_round=final_round)
            break

    async def load(
        self,
        msg: IncomingMessage,
        toolbox: Toolbox,
        sink: ReplySink,
        result: TurnResult,
        policy: PlacePolicy = DEFAULT_POLICY,
        resume: Resume | None = None,
    ) -> Turn | None:
        """Step 1: the session and the person's facts (none where the place's memory is off),
        and whether this message reached a turn before (bot.memory.resume). None when that turn
        already answered: its reply is reused."""
        # Two independent reads: at once, so neither waits behind the other's round trip.
        hot, facts = await asyncio.gather(
            self.memory.load(msg.session),
            # Only what everyone reading here could read (bot.audience); a DM scope: all of
            # theirs on the platform.
            facts_for(self.facts, msg.person, msg.audience) if policy.memory else _no_facts(),
        )
        history = list(hot.tail)
        prior = find_prior_turn(
            history, msg.message_id, msg.person.id, turn_id=resume.turn_id if resume else ""
        )
        if prior is not None and answered_by_a_sign_in_link(prior.rounds):
            prior = None  # asked again after the person connected: a new turn, not a replay
        if prior is not None:
            result.turn_id = prior.turn_id
            if prior.reply is not None:
                result.reply, result.outcome = prior.reply, "replayed"
                result.user_seq = prior.user.seq
                log.info("turn_replayed", extra={"fields": {"turn_id": result.turn_id}})
                return None
            history = history[: prior.index]
            log.info("turn_resumed", extra={"fields": {"turn_id": result.turn_id}})
        return Turn(
            policy=policy,
            place_note=policy.place_note(),
            msg=msg,
            toolbox=toolbox,
            sink=sink,
            result=result,
            hot=hot,
            facts=facts,
            history=history,
            prior=prior,
            named=several_speak(msg, history),
        )

    async def prepare_tools(self, turn: Turn) -> None:
        """Step 2: the tools offered for this message (the relevant ones when there are many)."""
        person = turn.msg.person.id
        earlier = [m.content for m in turn.history if m.role == "user" and m.speaker == person]
        used = {c["function"]["name"] for m in turn.history for c in (m.tool_calls or [])}
        await turn.toolbox.prepare(turn.msg.text, earlier[-3:], used)
        turn.schemas = turn.toolbox.schemas()
        turn.tools_tokens = self.builder.counter.tools(turn.schemas)

    async def recall_memories(self, turn: Turn) -> None:
        """Step 3: long-term memories for the message (a resumed turn keeps what it was sent
        the first time, stored with its request, so the model sees the same context) and what
        was said before it in its place (`Heard`)."""
        msg, history = turn.msg, turn.history
        recall = None
        if turn.prior is not None:
            turn.recalled = Recalled(text=turn.prior.recalled)
        elif self.recall is not None and turn.policy.memory and not self._lean(turn):
            recall = self.recall(msg, history, self.builder.recall_tokens)
        heard = self.heard(msg, history) if self.heard is not None else None
        if recall is not None and heard is not None:  # independent reads: at once
            turn.recalled, turn.said_before = await asyncio.gather(recall, heard)
        elif recall is not None:
            turn.recalled = await recall
        elif heard is not None:
            turn.said_before = await heard

    @staticmethod
    def _lean(turn: Turn) -> bool:
        return turn.hold is not None and turn.hold.lean

    @classmethod
    def _model_of(cls, turn: Turn) -> str | None:
        """The place's model; on a lean turn the cheaper one its admins named (`lean_model`)."""
        if cls._lean(turn) and turn.policy.lean_model:
            return turn.policy.lean_model
        return turn.policy.model or None

    async def take_files(self, turn: Turn) -> None:
        """Step 4: the shared files, fitted into a share of this turn's room."""
        if turn.msg.attachments:
            turn.files = await self._files(turn.msg, turn.tools_tokens, turn.place_note)

    async def record_request(self, turn: Turn) -> Exchange:
        """Step 5: the person's message written to the session (once, also when resumed), and
        the request's parts: the memory view, the current exchange and the tools' context."""
        msg, files, recalled = turn.msg, turn.files, turn.recalled
        meta: dict[str, Any] = {"message_id": msg.message_id} if msg.message_id else {}
        if files is not None:
            meta["files"] = files.records
        meta.update(message_meta(sent_at=msg.sent_at, private_place=msg.is_private or msg.is_dm))
        meta[META_AUDIENCE] = msg.audience.id
        meta.update(off_meta(turn.policy.memory))
        if recalled.text:
            meta.update(
                {
                    RECALLED: recalled.text,
                    RECALLED_FROM: recalled.people,
                    RECALLED_TOKENS: self.builder.counter.count(recalled.text),
                    RECALLED_IDS: recalled.ids,
                }
            )
        if turn.prior is not None:
            stored_user = turn.prior.user
        else:
            user_msg = NewMessage(
                role="user",
                content=files.stored_text(msg.text) if files else msg.text,
                speaker=msg.person.id,
                turn_id=turn.result.turn_id,
                name=msg.user_name,
                meta=meta,
            )
            (stored_user,) = await self.memory.append(msg.session, turn.hot, [user_msg])
        turn.result.user_seq = stored_user.seq
        view = MemoryView(
            speaker_facts=turn.facts,
            pinned=turn.hot.state.pinned,
            summary=turn.hot.state.summary,
            history=turn.history,
            speaker=msg.person.id,
            recalled=recalled.text,
            heard=turn.said_before.text,
            named=turn.named,
        )
        text = as_sent(msg, named=turn.named)
        content = files.content(text) if files else text
        current: list[dict[str, Any]] = [{"role": "user", "content": content}]
        resumed = turn.prior.completed_rounds() if turn.prior is not None else []
        current += resumed
        notes = turn.toolbox.notes()  # installed tools left out this turn (their server is down)
        if notes:
            current.append({"role": "system", "content": "\n".join(notes)})
        ctx = self._tool_context(turn, stored_user.seq)
        # Shared files are untrusted content from the start (bot.write_guard).
        guard = WriteGuard(msg.text, tainted=files is not None or bool(resumed))
        return Exchange(view=view, current=current, ctx=ctx, guard=guard)

    @staticmethod
    def _tool_context(turn: Turn, user_seq: int) -> ToolContext:
        """Who the tools act for: the same for a turn resumed after an approval, so a write's
        idempotency key is the pending call's."""
        msg = turn.msg
        return ToolContext(
            session_id=msg.session.id,
            speaker_id=msg.person.id,
            team_id=msg.session.team_key.id,
            turn_id=turn.result.turn_id,
            speaker_name=msg.user_name,
            message_id=msg.message_id,
            message_ref=f"{msg.session.id}#{user_seq}",
            audience=msg.audience.id,
            said_at=msg.sent_at,
        )

    async def settle_approvals(self, turn: Turn, resume: Resume) -> None:
        """Step 1b (a resumed turn): the decided calls settled, each result tied to its call
        id and stored: an approved call runs now (once: a result already stored is not run
        again, and the executor replays a write by its idempotency key), a denied or expired
        one gets a result saying it was declined. The model then sees them as a completed
        round."""
        assert turn.prior is not None
        prior = turn.prior
        have = {m.tool_call_id for m in prior.rounds if m.role == "tool"}
        ctx = self._tool_context(turn, prior.user.seq)
        done = sum(1 for m in prior.rounds if m.role == "tool")
        records: list[ToolCallRecord] = []
        settled: list[tuple[Approval, str]] = []
        for approval in resume.decided:
            if approval.call_id in have:
                settled.append((approval, "ok" if approval.status == "approved" else "declined"))
                continue
            if approval.status == "approved":
                call = ToolCallRequest(approval.call_id, approval.tool, approval.arguments)
                (record,) = await turn.toolbox.run([call], ctx, prior_calls=done)
                settled.append((approval, record.outcome))
            else:
                record = declined_record(approval)
                settled.append((approval, approval.status))
            records.append(record)
        turn.result.tool_calls.extend(records)
        await self._store_results(turn, ctx, records)
        if self.approvals is not None:
            for approval, outcome in settled:
                await self.approvals.settled(approval, outcome)
        turn.prior = find_prior_turn(
            turn.hot.tail, turn.msg.message_id, turn.msg.person.id, turn_id=prior.turn_id
        )

    async def _store_results(
        self, turn: Turn, ctx: ToolContext, records: list[ToolCallRecord]
    ) -> None:
        tool_msgs = [
            NewMessage(
                role="tool",
                content=r.content,
                speaker=ctx.speaker_id,
                turn_id=ctx.turn_id,
                name=r.name,
                tool_call_id=r.tool_call_id,
                from_tool=True,
                meta={
                    "call_id": r.call_id,
                    "outcome": r.outcome,
                    META_AUDIENCE: ctx.audience,
                    **off_meta(turn.policy.memory),
                },
            )
            for r in records
        ]
        if tool_msgs:
            await self.memory.append(turn.msg.session, turn.hot, tool_msgs)

    async def model_round(
        self, turn: Turn, ex: Exchange, round_no: int, *, final_round: bool
    ) -> ModelResponse:
        """Step 6: one request to the model. The final round (past `max_rounds`) asks for an
        answer without tools. A first request the server rejects as malformed is retried once
        without images, then without tools (some compatible servers take neither)."""
        if final_round:
            ex.current.append({"role": "system", "content": FINAL_ANSWER_NOTE})
        if round_no > 1 and not turn.tools_rejected:  # a tool asked for may be offered now
            offered = turn.toolbox.schemas()
            if len(offered) != len(turn.schemas):
                turn.schemas, turn.tools_tokens = offered, self.builder.counter.tools(offered)
        builder = turn.builder or self.builder
        built = builder.build(
            ex.view, ex.current, tools_tokens=turn.tools_tokens, place_note=turn.place_note
        )
        if round_no == 1 and turn.hold is not None:
            refusal = await turn.hold.reserve(built.tokens, builder.reply_tokens)
            if refusal is not None:
                raise BudgetRefused(refusal)
        turn.result.request_tokens.append(built.tokens)
        turn.result.rounds = round_no
        while True:
            try:
                return await self.model.complete(
                    built.messages,
                    tools=turn.schemas or None,
                    tool_choice="none" if final_round and turn.schemas else None,
                    on_delta=turn.sink.delta,
                    max_tokens=builder.reply_tokens,
                    model=self._model_of(turn),
                )
            except ModelError as err:
                if err.kind != "bad_request" or round_no > 1 or not self._degrade(turn, ex):
                    raise
                built = builder.build(
                    ex.view, ex.current, tools_tokens=turn.tools_tokens, place_note=turn.place_note
                )
                turn.result.request_tokens[-1] = built.tokens

    def _degrade(self, turn: Turn, ex: Exchange) -> bool:
        """After a malformed-request refusal: drop the images, else the tools. False when
        there is nothing left to drop (the refusal stands)."""
        files, text = turn.files, as_sent(turn.msg, named=turn.named)
        turn_id = turn.result.turn_id
        if (
            files is not None
            and files.images
            and ex.current[0]["content"] != (text_only := files.content(text, with_images=False))
        ):
            # A server that takes no image parts: the images become a note saying so, and
            # (BOT_VISION=auto) this process stops sending them.
            log.warning("model_rejected_images", extra={"fields": {"turn_id": turn_id}})
            self.vision.refused()
            ex.current[0] = {"role": "user", "content": text_only}
            return True
        if turn.schemas:
            # Some OpenAI-compatible servers/models reject function tools outright: answer
            # without them rather than not at all.
            log.warning("model_rejected_tools", extra={"fields": {"turn_id": turn_id}})
            turn.schemas, turn.tools_tokens, turn.tools_rejected = [], 0, True
            return True
        return False

    async def finish(
        self, turn: Turn, ex: Exchange, response: ModelResponse, *, final_round: bool
    ) -> None:
        """Step 8: the answer recorded (marked private when a private tool's result fed it)
        and handed to the result; whether the session is due for a summary."""
        reply = response.content.strip() or EMPTY_REPLY
        result = turn.result
        private = any(r.name in PRIVATE_TOOLS for r in result.tool_calls)
        answer = NewMessage(
            role="assistant",
            content=reply,
            speaker=turn.msg.person.id,
            turn_id=result.turn_id,
            meta={
                META_AUDIENCE: ex.ctx.audience,
                META_MODEL: turn.policy.model or self.default_model,
                **off_meta(turn.policy.memory),
                **({"private": True} if private else {}),
            },
        )
        await self.memory.append(turn.msg.session, turn.hot, [answer])
        result.reply = reply
        result.outcome = "max_rounds" if final_round else "answer"
        result.needs_compression = self.memory.needs_compression(
            turn.hot
        ) and self.memory.summary_due(turn.hot.state)

    async def _files(self, msg: IncomingMessage, tools_tokens: int, place_note: str) -> FileInput:
        """The message's files fitted into a share of this turn's room (the rest is for the
        person's text, and for tool rounds)."""
        counter = self.builder.counter
        share = int(
            self.builder.current_cap(tools_tokens, place_note) * FILE_SHARE
        ) - counter.count(msg.text)
        return await prepare_files(
            msg.attachments,
            counter=counter,
            limits=self.file_limits,
            share_tokens=max(share, 0),
            vision=self.vision.enabled,
        )

    async def tool_round(self, turn: Turn, ex: Exchange, response: ModelResponse) -> None:
        """Step 7: the calls the model asked for, capped, each written as it happens: the
        request, then every result tied to its call id. A write the person's words did not
        ask for is refused here (bot.write_guard), not run."""
        session, hot, toolbox = turn.msg.session, turn.hot, turn.toolbox
        ctx, current, result, guard = ex.ctx, ex.current, turn.result, ex.guard
        prior = sum(1 for r in result.tool_calls if r.outcome != "limit_exceeded")
        calls = response.tool_calls
        keep = toolbox.call_allowance(prior) + REFUSED_CALLS_SHOWN
        if len(calls) > keep:
            log.warning(
                "tool_calls_dropped",
                extra={"fields": {"turn_id": ctx.turn_id, "asked": len(calls), "kept": keep}},
            )
            calls = calls[:keep]
        call_dicts = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
        assistant = NewMessage(
            role="assistant",
            content=response.content,
            speaker=ctx.speaker_id,
            turn_id=ctx.turn_id,
            tool_calls=call_dicts,
            meta={META_AUDIENCE: ctx.audience, **off_meta(turn.policy.memory)},
        )
        await self.memory.append(session, hot, [assistant])
        current.append(
            {"role": "assistant", "content": response.content or None, "tool_calls": call_dicts}
        )
        # The write guard first: a write asked for by injected text is refused before any
        # approval is shown; then the calls that wait for the person are set aside.
        blocked = {c.id for c in calls if guard.blocks(c, toolbox.registry)}
        waiting = await self._waiting(turn, ctx, [c for c in calls if c.id not in blocked])
        allowed = [c for c in calls if c.id not in blocked and c.id not in waiting]
        started_ns = tracing.now_ns()
        ran = iter(await toolbox.run(allowed, ctx, prior_calls=prior))
        records = [
            guard.refusal(c) if c.id in blocked else next(ran) for c in calls if c.id not in waiting
        ]
        if blocked:
            log.warning(
                "write_tool_not_asked",
                extra={
                    "fields": {
                        "turn_id": ctx.turn_id,
                        "tools": sorted({c.name for c in calls if c.id in blocked}),
                    }
                },
            )
        guard.saw_results(records)
        for r in records:
            tracing.record_span(
                f"tool {r.name[:64]}",
                started_ns=started_ns,
                duration_ms=r.duration_ms,
                attributes={
                    "tool.call_id": r.call_id,
                    "tool.tool_call_id": r.tool_call_id[:128],
                    "tool.outcome": r.outcome,
                    "tool.attempts": r.attempts,
                },
            )
        result.tool_calls.extend(records)
        await self._store_results(turn, ctx, records)
        for r in records:
            current.append({"role": "tool", "tool_call_id": r.tool_call_id, "content": r.content})
        if waiting:
            await self._pause(turn, ctx, [c for c in calls if c.id in waiting])

    async def _still_paused(self, turn: Turn) -> bool:
        """A re-delivered message whose turn is waiting for the person (its process died after
        asking, before the delivery was done): the request is shown again, the turn does not
        run a second time. A turn whose calls were decided is left to its resume or the sweep."""
        if self.approvals is None or turn.prior is None:
            return False
        asked = await self.approvals.store.of_turn(turn.msg.session.id, turn.prior.turn_id)
        if not asked or all(a.outcome for a in asked):
            return False
        result = turn.result
        result.outcome = "awaiting_approval"
        pending = [a for a in asked if a.status == "pending"]
        result.approvals = pending
        if pending and callable(getattr(turn.sink, "ask_approval", None)):
            sink: ShowsApprovals = turn.sink  # type: ignore[assignment]
            result.reply = await sink.ask_approval(pending)
        else:
            result.reply = WAITING_REPLY
        log.info("turn_still_paused", extra={"fields": {"turn_id": result.turn_id}})
        return True

    async def _waiting(
        self, turn: Turn, ctx: ToolContext, calls: list[ToolCallRequest]
    ) -> set[str]:
        """The ids of the calls that wait for the person's approval (none without a desk, or
        where the sink cannot show a request)."""
        if self.approvals is None or not callable(getattr(turn.sink, "ask_approval", None)):
            return set()
        out: set[str] = set()
        for c in calls:
            tool = turn.toolbox.registry.get(c.name)
            if tool is not None and await self.approvals.waits(
                tool, turn.policy, ctx, turn.msg.channel
            ):
                out.add(c.id)
        return out

    async def _pause(self, turn: Turn, ctx: ToolContext, calls: list[ToolCallRequest]) -> None:
        """Step 7b: the turn stops here; each waiting call is stored as a pending approval,
        and the person is shown the request (the sink's way, or as the reply)."""
        assert self.approvals is not None
        opened = [await self.approvals.open(turn.msg, ctx, c) for c in calls]
        result = turn.result
        result.approvals = opened
        result.outcome = "awaiting_approval"
        sink: ShowsApprovals = turn.sink  # type: ignore[assignment]  # checked by `_waiting`
        result.reply = await sink.ask_approval(opened)
