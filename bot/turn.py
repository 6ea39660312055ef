"""The turn: one incoming message in, one reply out, with tool calls in between.

Loop: build the context -> ask the model -> if it asked for tools, run them (in parallel, through
the executor), feed each result back as a `tool` message tied to its `tool_call_id`, repeat.
Stops on a final answer; on `max_rounds` (then one last request with tool_choice="none" asking for
an answer from what it has); or on an unrecoverable model error (then a friendly apology).
Every step is written to session memory as it happens (user message, tool calls, results, reply).
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
from bot.audience import META_AUDIENCE
from bot.files.intake import FileLimits
from bot.files.prepare import FileInput, prepare_files
from bot.files.vision import Vision
from bot.keys import SessionKey
from bot.memory.context import ContextBuilder, MemoryView
from bot.memory.episodic.excerpts import message_meta
from bot.memory.heard import Earlier
from bot.memory.prompts import FINAL_ANSWER_NOTE
from bot.memory.render import (
    PRIVATE_TOOLS,
    RECALLED,
    RECALLED_FROM,
    RECALLED_IDS,
    RECALLED_TOKENS,
)
from bot.memory.resume import find_prior_turn
from bot.memory.session import HotSession, SessionMemory
from bot.memory.speaker_facts import facts_for
from bot.messages import IncomingMessage, ReplySink
from bot.model import ModelError, ModelResponse
from bot.stores.protocols import FactStore, StoreUnavailable
from bot.stores.records import NewMessage, StoredMessage
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
        str  # "answer" | "max_rounds" | "replayed" | "model_error" | "timeout"
        # | "store_unavailable" | "error"
    )
    rounds: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    request_tokens: list[int] = field(default_factory=list)
    duration_ms: float = 0.0
    needs_compression: bool = False


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
    ) -> None:
        self.recall = recall
        self.heard = heard
        self.model = model
        self.memory = memory
        self.facts = facts
        self.builder = builder
        self.max_rounds = max_rounds
        self.turn_timeout = turn_timeout
        self.file_limits = file_limits or FileLimits()
        self.vision = vision or Vision("off", "")

    async def run(self, msg: IncomingMessage, toolbox: Toolbox, sink: ReplySink) -> TurnResult:
        with tracing.span("turn", {"session": msg.session.id, "platform": msg.platform}) as current:
            result = await self._traced(msg, toolbox, sink)
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

    async def _traced(self, msg: IncomingMessage, toolbox: Toolbox, sink: ReplySink) -> TurnResult:
        started = time.perf_counter()
        result = TurnResult(turn_id="t_" + uuid.uuid4().hex[:16], reply="", outcome="error")
        try:
            async with asyncio.timeout(self.turn_timeout):
                await self._run(msg, toolbox, sink, result)
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
        try:
            await sink.finish(result.reply, error=failed)
        except Exception:
            log.exception("sink_finish_failed", extra={"fields": {"turn_id": result.turn_id}})
        return result

    async def _run(
        self, msg: IncomingMessage, toolbox: Toolbox, sink: ReplySink, result: TurnResult
    ) -> None:
        session, person, turn_id = msg.session, msg.person, result.turn_id
        await sink.working()
        # Two independent reads: at once, so neither waits behind the other's round trip.
        hot, facts = await asyncio.gather(
            self.memory.load(session),
            # Only what everyone reading here could read (bot.audience); a DM scope: all of
            # theirs on the platform.
            facts_for(self.facts, person, msg.audience),
        )
        history = list(hot.tail)
        prior = find_prior_turn(history, msg.message_id, person.id)
        if prior is not None:  # this message reached a turn before (bot.memory.resume)
            result.turn_id = turn_id = prior.turn_id
            if prior.reply is not None:
                result.reply, result.outcome = prior.reply, "replayed"
                log.info("turn_replayed", extra={"fields": {"turn_id": turn_id}})
                return
            history = history[: prior.index]
            log.info("turn_resumed", extra={"fields": {"turn_id": turn_id}})
        earlier = [m.content for m in history if m.role == "user" and m.speaker == person.id]
        used = {c["function"]["name"] for m in history for c in (m.tool_calls or [])}
        await toolbox.prepare(msg.text, earlier[-3:], used)  # many tools: the relevant ones
        recalled = Recalled()
        said_before = Earlier()
        if prior is not None:
            recalled = Recalled(text=prior.recalled)  # as sent the first time (stored with it)
            if self.heard is not None:
                said_before = await self.heard(msg, history)
        elif self.recall is not None and self.heard is not None:
            recalled, said_before = await asyncio.gather(
                self.recall(msg, history, self.builder.recall_tokens), self.heard(msg, history)
            )
        elif self.recall is not None:
            recalled = await self.recall(msg, history, self.builder.recall_tokens)
        elif self.heard is not None:
            said_before = await self.heard(msg, history)
        schemas = toolbox.schemas()
        tools_tokens = self.builder.counter.tools(schemas)
        tools_rejected = False
        files = await self._files(msg, tools_tokens) if msg.attachments else None
        meta: dict[str, Any] = {"message_id": msg.message_id} if msg.message_id else {}
        if files is not None:
            meta["files"] = files.records
        meta.update(message_meta(sent_at=msg.sent_at, private_place=msg.is_private or msg.is_dm))
        meta[META_AUDIENCE] = msg.audience.id
        if recalled.text:
            meta.update(
                {
                    RECALLED: recalled.text,
                    RECALLED_FROM: recalled.people,
                    RECALLED_TOKENS: self.builder.counter.count(recalled.text),
                    RECALLED_IDS: recalled.ids,
                }
            )
        user_msg = NewMessage(
            role="user",
            content=files.stored_text(msg.text) if files else msg.text,
            speaker=person.id,
            turn_id=turn_id,
            name=msg.user_name,
            meta=meta,
        )
        if prior is not None:
            stored_user = prior.user
        else:
            (stored_user,) = await self.memory.append(session, hot, [user_msg])
        view = MemoryView(
            speaker_facts=facts,
            pinned=hot.state.pinned,
            summary=hot.state.summary,
            history=history,
            speaker=person.id,
            recalled=recalled.text,
            heard=said_before.text,
        )
        content = files.content(msg.text) if files else msg.text
        current: list[dict[str, Any]] = [{"role": "user", "content": content}]
        resumed = prior.completed_rounds() if prior is not None else []
        current += resumed
        notes = toolbox.notes()  # installed tools left out this turn (their server is down)
        if notes:
            current.append({"role": "system", "content": "\n".join(notes)})
        ctx = ToolContext(
            session_id=session.id,
            speaker_id=person.id,
            team_id=session.team_key.id,
            turn_id=turn_id,
            speaker_name=msg.user_name,
            message_id=msg.message_id,
            message_ref=f"{session.id}#{stored_user.seq}",
            audience=msg.audience.id,
            said_at=msg.sent_at,
        )
        # Shared files are untrusted content from the start (bot.write_guard).
        guard = WriteGuard(msg.text, tainted=files is not None or bool(resumed))

        for round_no in range(1, self.max_rounds + 2):
            final_round = round_no > self.max_rounds
            if final_round:
                current.append({"role": "system", "content": FINAL_ANSWER_NOTE})
            if round_no > 1 and not tools_rejected:  # a tool asked for may be offered now
                offered = toolbox.schemas()
                if len(offered) != len(schemas):
                    schemas, tools_tokens = offered, self.builder.counter.tools(offered)
            built = self.builder.build(view, current, tools_tokens=tools_tokens)
            result.request_tokens.append(built.tokens)
            result.rounds = round_no
            while True:
                try:
                    response = await self.model.complete(
                        built.messages,
                        tools=schemas or None,
                        tool_choice="none" if final_round and schemas else None,
                        on_delta=sink.delta,
                        max_tokens=self.builder.reply_tokens,
                    )
                    break
                except ModelError as err:
                    if err.kind != "bad_request" or round_no > 1:
                        raise
                    if (
                        files is not None
                        and files.images
                        and current[0]["content"]
                        != (text_only := files.content(msg.text, with_images=False))
                    ):
                        # A server that takes no image parts: the images become a note saying
                        # so, and (BOT_VISION=auto) this process stops sending them.
                        log.warning("model_rejected_images", extra={"fields": {"turn_id": turn_id}})
                        self.vision.refused()
                        current[0] = {"role": "user", "content": text_only}
                    elif schemas:
                        # Some OpenAI-compatible servers/models reject function tools outright:
                        # answer without them rather than not at all.
                        log.warning("model_rejected_tools", extra={"fields": {"turn_id": turn_id}})
                        schemas, tools_tokens, tools_rejected = [], 0, True
                    else:
                        raise
                    built = self.builder.build(view, current, tools_tokens=tools_tokens)
                    result.request_tokens[-1] = built.tokens
            if response.tool_calls and not final_round:
                await self._tool_round(session, hot, response, toolbox, ctx, current, result, guard)
                continue
            reply = response.content.strip() or EMPTY_REPLY
            private = any(r.name in PRIVATE_TOOLS for r in result.tool_calls)
            await self.memory.append(
                session,
                hot,
                [
                    NewMessage(
                        role="assistant",
                        content=reply,
                        speaker=person.id,
                        turn_id=turn_id,
                        meta={
                            META_AUDIENCE: ctx.audience,
                            **({"private": True} if private else {}),
                        },
                    )
                ],
            )
            result.reply = reply
            result.outcome = "max_rounds" if final_round else "answer"
            break
        result.needs_compression = self.memory.needs_compression(hot) and self.memory.summary_due(
            hot.state
        )

    async def _files(self, msg: IncomingMessage, tools_tokens: int) -> FileInput:
        """The message's files fitted into a share of this turn's room (the rest is for the
        person's text, and for tool rounds)."""
        counter = self.builder.counter
        share = int(self.builder.current_cap(tools_tokens) * FILE_SHARE) - counter.count(msg.text)
        return await prepare_files(
            msg.attachments,
            counter=counter,
            limits=self.file_limits,
            share_tokens=max(share, 0),
            vision=self.vision.enabled,
        )

    async def _tool_round(
        self,
        session: SessionKey,
        hot: HotSession,
        response: ModelResponse,
        toolbox: Toolbox,
        ctx: ToolContext,
        current: list[dict[str, Any]],
        result: TurnResult,
        guard: WriteGuard,
    ) -> None:
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
            meta={META_AUDIENCE: ctx.audience},
        )
        await self.memory.append(session, hot, [assistant])
        current.append(
            {"role": "assistant", "content": response.content or None, "tool_calls": call_dicts}
        )
        blocked = {c.id for c in calls if guard.blocks(c, toolbox.registry)}
        allowed = [c for c in calls if c.id not in blocked]
        started_ns = tracing.now_ns()
        ran = iter(await toolbox.run(allowed, ctx, prior_calls=prior))
        records = [guard.refusal(c) if c.id in blocked else next(ran) for c in calls]
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
        tool_msgs = [
            NewMessage(
                role="tool",
                content=r.content,
                speaker=ctx.speaker_id,
                turn_id=ctx.turn_id,
                name=r.name,
                tool_call_id=r.tool_call_id,
                from_tool=True,
                meta={"call_id": r.call_id, "outcome": r.outcome, META_AUDIENCE: ctx.audience},
            )
            for r in records
        ]
        await self.memory.append(session, hot, tool_msgs)
        for r in records:
            current.append({"role": "tool", "tool_call_id": r.tool_call_id, "content": r.content})
