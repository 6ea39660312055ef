"""Assembling one model request's messages inside the token budget.

Order, most stable first (so providers' prompt caching keeps hitting):
  1. the constant system prompt, followed by the place's note (`bot.policy.PlacePolicy`: its
     language and its admins' standing instructions), constant per place,
  2. a memory note: the speaker's stored facts, the session's pinned key facts, the rolling summary,
  3. the most recent raw history, cut at turn boundaries, older tool results shrunk (turns in
     which someone else asked the bot to remember something personal are left out),
  4. earlier messages of the place the bot heard but was not asked about (`bot.memory.heard`;
     they change every turn, like the memories recalled after them),
  4. memories recalled for this message (episodic retrieval; they change every turn, so they
     come after the history, never before it, and a fixed share of the budget is reserved for
     them whether used or not: the history's cut never moves because of them),
  5. the current turn (the user's message and this turn's tool calls and results).

Budget = BOT_CONTEXT_TOKENS - reply allowance - tool schemas. The current turn and the memory note
are always kept (shrunk if they must be); history fills what is left, newest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cachetools

from bot.memory.prompts import SYSTEM_PROMPT
from bot.memory.render import group_turns, is_private_turn, render_group
from bot.memory.speaker_facts import remembered_elsewhere
from bot.memory.speakers import said_by
from bot.memory.tags import tag_recalled
from bot.stores.records import Fact, PinnedFact, StoredMessage
from bot.tokens import REPLY_PRIMER, TokenCounter

FRESH_TURNS = 2  # turns whose tool results are kept whole
MIN_TOOL_CONTENT_TOKENS = 64
# Last resort when even the latest round's trimmed results do not fit: the result is left out.
ARGS_LEFT_OUT = "…[arguments left out to fit the context]"
RESULT_LEFT_OUT = (
    '{"ok": false, "error": {"type": "trimmed", "message": "result left out to fit the context"}}'
)


@dataclass
class MemoryView:
    """What session and long-term memory contribute to one request."""

    speaker_facts: Sequence[Fact] = ()
    pinned: Sequence[PinnedFact] = ()
    summary: str = ""
    history: Sequence[StoredMessage] = ()  # unsummarised messages before this turn, oldest first
    speaker: str = ""  # PersonKey.id of the person being answered
    recalled: str = ""  # episodic memories for this message, already within `recall_tokens`
    # Earlier messages of the place that are not in the conversation (`bot.memory.heard`).
    heard: str = ""
    # Several people talk here: each user message says who said it (`bot.memory.speakers`).
    named: bool = False


@dataclass
class BuiltContext:
    messages: list[dict[str, Any]]
    tokens: int  # messages + tool schemas, as counted
    history_messages: int
    dropped_history: int = 0
    notes: list[str] = field(default_factory=list)


def _fact_line(fact: Fact, speaker: str) -> str:
    """A fact of another scope (a guild's, used in a DM) says where it was remembered."""
    where = remembered_elsewhere(fact, speaker)
    return f"- {fact.text} (remembered in {where})" if where else f"- {fact.text}"


def memory_note(view: MemoryView) -> str:
    parts: list[str] = []
    if view.speaker_facts:
        lines = "\n".join(_fact_line(f, view.speaker) for f in view.speaker_facts)
        parts.append("What you know about the person you are answering:\n" + tag_recalled(lines))
    if view.pinned:
        lines = "\n".join(f"- {p.text}" for p in view.pinned)
        parts.append(f"Key facts of this conversation:\n{lines}")
    if view.summary:
        parts.append(f"Summary of the earlier conversation:\n{view.summary}")
    return "\n\n".join(parts)


class ContextBuilder:
    def __init__(
        self, counter: TokenCounter, *, budget: int, reply_tokens: int, recall_tokens: int = 0
    ) -> None:
        self.counter = counter
        self.budget = budget
        self.reply_tokens = reply_tokens
        self.recall_tokens = recall_tokens  # reserved for recalled memories (0: none)
        self._system = {"role": "system", "content": SYSTEM_PROMPT}
        self._system_tokens = counter.message(self._system)
        # Places' system messages with their note, by note (bounded: places come and go).
        self._placed: cachetools.LRUCache[str, tuple[dict[str, Any], int]] = cachetools.LRUCache(
            maxsize=256
        )

    def system_message(self, place_note: str = "") -> tuple[dict[str, Any], int]:
        """The system message for a place and its tokens: the bot's own text, then the
        place's note (the same bytes every turn there, so the prefix stays cacheable)."""
        if not place_note:
            return self._system, self._system_tokens
        found = self._placed.get(place_note)
        if found is None:
            message = {"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{place_note}"}
            found = self._placed[place_note] = (message, self.counter.message(message))
        return found

    def lean(self) -> ContextBuilder:
        """The builder of a lean turn (a budget at 80 %): half the room, nothing recalled;
        the reply allowance is kept so answers are not cut."""
        budget = max(self.budget // 2, self.reply_tokens * 2)
        return ContextBuilder(
            self.counter, budget=budget, reply_tokens=self.reply_tokens, recall_tokens=0
        )

    @property
    def prompt_budget(self) -> int:
        """Tokens the request (messages + tools) may use; the rest is the reply allowance."""
        return self.budget - self.reply_tokens

    def _available(self, tools_tokens: int, place_note: str = "") -> int:
        system_tokens = self.system_message(place_note)[1]
        return self.prompt_budget - tools_tokens - REPLY_PRIMER - system_tokens

    def current_cap(self, tools_tokens: int, place_note: str = "") -> int:
        """Tokens this turn's own messages may use before they are shrunk (files are fitted to a
        share of it up front, see `bot.files`)."""
        available = self._available(tools_tokens, place_note)
        return max(available // 2, available - 400)

    def build(
        self,
        view: MemoryView,
        current: list[dict[str, Any]],
        *,
        tools_tokens: int,
        place_note: str = "",
    ) -> BuiltContext:
        count = self.counter.message
        system, system_tokens = self.system_message(place_note)
        available = self._available(tools_tokens, place_note)
        notes: list[str] = []

        current = self._fit_current(current, self.current_cap(tools_tokens, place_note), notes)
        available -= sum(count(m) for m in current)
        recalled: dict[str, Any] | None = None
        if self.recall_tokens:
            reserve = min(self.recall_tokens, max(available // 3, 0))
            available -= reserve
            if view.recalled:
                recalled = {"role": "system", "content": view.recalled}
                if count(recalled) > reserve:
                    recalled["content"] = self.counter.truncate(view.recalled, max(reserve - 8, 0))
                    notes.append("recalled memories truncated")
                if not recalled["content"]:
                    recalled = None

        heard: dict[str, Any] | None = None
        if view.heard:
            # Bounded by its maker (about 1,500 tokens); a small budget cuts it further.
            heard = {"role": "system", "content": view.heard}
            cap = max(available // 4, 0)
            if count(heard) > cap:
                heard["content"] = self.counter.truncate(view.heard, max(cap - 8, 0))
                notes.append("earlier messages truncated")
            if heard["content"]:
                available -= count(heard)
            else:
                heard = None

        note_text = memory_note(view)
        note_msg: dict[str, Any] | None = None
        if note_text:
            note_msg = {"role": "system", "content": note_text}
            note_cap = max(available * 2 // 3, 0)
            if count(note_msg) > note_cap:
                note_msg["content"] = self.counter.truncate(note_text, max(note_cap - 8, 0))
                notes.append("memory note truncated")
            available -= count(note_msg)

        groups = [
            g
            for g in group_turns(list(view.history))
            if g[0].speaker == view.speaker
            or (not is_private_turn(g) and g[0].role == "user")  # another's cut-off turn: out
        ]
        kept: list[list[dict[str, Any]]] = []
        kept_count = 0
        history_tokens = 0
        for age, group in enumerate(reversed(groups)):
            rendered = render_group(group, aged=age >= FRESH_TURNS, named=view.named)
            known = self._known(group, named=view.named)
            cost = sum(self._cost(m, known) for m in rendered)
            if cost > available:
                break
            available -= cost
            history_tokens += cost
            kept.append(rendered)
            kept_count += len(group)
        history = [m for group in reversed(kept) for m in group]

        messages = [system]
        if note_msg is not None:
            messages.append(note_msg)
        messages.extend(history)
        if heard is not None:
            messages.append(heard)
        if recalled is not None:
            messages.append(recalled)
        messages.extend(current)
        tokens = (
            system_tokens
            + (count(note_msg) if note_msg is not None else 0)
            + (count(recalled) if recalled is not None else 0)
            + (count(heard) if heard is not None else 0)
            + history_tokens
            + sum(count(m) for m in current)
            + REPLY_PRIMER
            + tools_tokens
        )
        return BuiltContext(
            messages=messages,
            tokens=tokens,
            history_messages=kept_count,
            dropped_history=sum(len(g) for g in groups) - kept_count,
            notes=notes,
        )

    def _known(self, group: Sequence[StoredMessage], *, named: bool) -> dict[str, int]:
        """The token counts stored with a turn's messages, keyed by the content as rendered
        (a named user message: its stored count plus its short label's)."""
        known: dict[str, int] = {}
        for m in group:
            if not m.tokens and m.content:
                continue
            if named and m.role == "user":
                label = said_by("", m.name, m.speaker)
                known[label + m.content] = m.tokens + self.counter.count(label)
            else:
                known[m.content] = m.tokens
        return known

    def _cost(self, message: dict[str, Any], known: dict[str, int]) -> int:
        """`TokenCounter.message`, reusing the token counts stored with each message."""
        content = message.get("content")
        if isinstance(content, str) and content in known:
            plain = {k: v for k, v in message.items() if k != "content"}
            return known[content] + self.counter.message(plain)
        return self.counter.message(message)

    def _fit_current(
        self, current: list[dict[str, Any]], cap: int, notes: list[str]
    ) -> list[dict[str, Any]]:
        """Make this turn fit: shrink tool results (largest first), then the model's own tool-call
        arguments, then drop the oldest tool rounds of the turn (a call stays with its results),
        and last cut the user's text."""
        count = self.counter.message
        total = sum(count(m) for m in current)
        if total <= cap:
            return current
        out = [dict(m) for m in current]
        tool_idx = sorted(
            (i for i, m in enumerate(out) if m["role"] == "tool"),
            key=lambda i: -count(out[i]),
        )
        for i in tool_idx:
            if total <= cap:
                break
            excess = total - cap
            size = count(out[i])
            target = max(MIN_TOOL_CONTENT_TOKENS, size - excess - 16)
            out[i]["content"] = (
                self.counter.truncate(str(out[i]["content"]), target)
                + " …[trimmed to fit the context]"
            )
            total = total - size + count(out[i])
            notes.append("tool result trimmed to fit")
        if total > cap:
            total = self._shrink_call_arguments(out, total, cap, notes)
        while total > cap:
            start = next((i for i, m in enumerate(out) if m.get("tool_calls")), None)
            if start is None:
                break
            end = start + 1
            while end < len(out) and out[end]["role"] == "tool":
                end += 1
            if not any(m.get("tool_calls") for m in out[end:]):
                break  # keep the latest round: the model needs its results to answer
            total -= sum(count(m) for m in out[start:end])
            del out[start:end]
            notes.append("earlier tool round of this turn dropped to fit")
        for i, m in enumerate(out):
            if total <= cap:
                break
            if m["role"] == "user" and isinstance(m.get("content"), (str, list)):
                size = count(m)
                target = max(32, size - (total - cap) - 16)
                out[i]["content"] = self._cut_user(m["content"], target)
                total = total - size + count(out[i])
                notes.append("user message cut to fit")
        for i, m in enumerate(out):
            if total <= cap:
                break
            if m["role"] == "tool" and m.get("content") != RESULT_LEFT_OUT:
                size = count(m)
                out[i]["content"] = RESULT_LEFT_OUT
                total = total - size + count(out[i])
                notes.append("tool result left out to fit")
        for i, m in enumerate(out):
            if total <= cap:
                break
            if m.get("tool_calls"):
                size = count(m)
                calls = [
                    {**c, "function": {**c.get("function", {}), "arguments": ARGS_LEFT_OUT}}
                    for c in m["tool_calls"]
                ]
                out[i] = {**m, "tool_calls": calls}
                total = total - size + count(out[i])
                notes.append("tool call arguments left out to fit")
        return out

    def _cut_user(self, content: str | list[dict[str, Any]], target: int) -> Any:
        """The user's text cut to about `target` tokens (with image parts, their text part)."""
        if isinstance(content, str):
            return self.counter.truncate(content, target) + " …[message too long, cut]"
        images = sum(self.counter.message({"content": [p]}) - 4 for p in content[1:])
        text = str(content[0].get("text", "")) if content else ""
        cut = self.counter.truncate(text, max(target - images, 32)) + " …[message too long, cut]"
        return [{"type": "text", "text": cut}, *content[1:]]

    def _shrink_call_arguments(
        self, out: list[dict[str, Any]], total: int, cap: int, notes: list[str]
    ) -> int:
        """Cut oversized arguments of the model's own tool calls (kept as a marked string)."""
        count = self.counter.message
        for i, m in enumerate(out):
            if total <= cap or not m.get("tool_calls"):
                continue
            size = count(m)
            calls = []
            for call in m["tool_calls"]:
                args = str(call.get("function", {}).get("arguments", ""))
                if self.counter.count(args) > MIN_TOOL_CONTENT_TOKENS:
                    args = (
                        self.counter.truncate(args, MIN_TOOL_CONTENT_TOKENS)
                        + " …[arguments trimmed to fit the context]"
                    )
                    notes.append("tool call arguments trimmed to fit")
                calls.append({**call, "function": {**call.get("function", {}), "arguments": args}})
            out[i] = {**m, "tool_calls": calls}
            total = total - size + count(out[i])
        return total
