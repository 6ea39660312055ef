"""The model the scale tests script: a FakeOpenAI brain that answers slowly and says what it saw.

Every message the harness sends carries a marker (`q-<run>-<n>`, see `cluster.marker`). The brain
finds the marker of the conversation's last user message and answers `answer to <marker>`, so a
reply names the message it answers, and the requests it received show what each turn saw (the
earlier answers in its context). It can also ask for one write tool first (`write_tool`: a name
ending, e.g. `_create_ticket`), then answer once the tool's result is back.

Delays are attributes the test changes while it runs: `answer_delay` (seconds before a final
answer), `call_delay` (before a tool call). `hold` (an asyncio.Event that is cleared) parks
final answers until it is set, so a test can keep turns in flight as long as it needs, and a
killed client's parked requests simply go away with their connection. Markers in `partial`
are answered differently while parked: the first piece of the answer is streamed at once (the
bot shows it), then the stream stalls; a turn killed there has a visible, unfinished reply.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from testkit.fakes.openai_server import FakeOpenAI, Step, message_text, text, tool_calls

MARKER = re.compile(r"\bq-[0-9a-z]+-\d+\b")


def answer_for(marker: str) -> str:
    """The final answer the brain gives to the message carrying `marker`."""
    return f"answer to {marker}"


def ticket_title(marker: str) -> str:
    """The title the brain gives the write tool for the message carrying `marker`."""
    return f"please create {marker}"


def markers_in(value: str) -> list[str]:
    return MARKER.findall(value)


def last_user_marker(request: dict[str, Any]) -> str | None:
    """The marker of the last user message of a chat request (None: not one of ours)."""
    for message in reversed(request.get("messages") or []):
        if message.get("role") == "user":
            found = markers_in(message_text(message))
            return found[-1] if found else None
    return None


def is_final_round(request: dict[str, Any]) -> bool:
    """The request follows a tool result (the round that produces the answer)."""
    messages = request.get("messages") or []
    return bool(messages) and messages[-1].get("role") == "tool"


def assistant_texts(request: dict[str, Any]) -> list[str]:
    """What the assistant said earlier in the context of this request, in order."""
    return [
        message_text(m)
        for m in request.get("messages") or []
        if m.get("role") == "assistant" and message_text(m)
    ]


@dataclass
class ScaleBrain:
    answer_delay: float = 0.0
    call_delay: float = 0.0
    write_tool: str | None = None  # the ending of the tool's offered name, e.g. "_create_ticket"
    hold: asyncio.Event = field(default_factory=asyncio.Event)
    holding: bool = False  # when True, final answers wait for `hold` (at most `hold_limit`)
    hold_limit: float = 60.0
    partial: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.hold.set()

    def park(self) -> None:
        """From now on final answers wait until `release()`."""
        self.holding = True
        self.hold.clear()

    def release(self) -> None:
        self.holding = False
        self.hold.set()

    def _tool_name(self, request: dict[str, Any]) -> str | None:
        if self.write_tool is None or request.get("tool_choice") == "none":
            return None
        for tool in request.get("tools") or []:
            name = str((tool.get("function") or {}).get("name") or "")
            if name.endswith(self.write_tool):
                return name
        return None

    async def __call__(self, request: dict[str, Any]) -> Step:
        marker = last_user_marker(request)
        if marker is None:  # a summary / extraction call, or something not ours
            return text("ok")
        tool = self._tool_name(request)
        messages = request.get("messages") or []
        if tool is not None and messages and messages[-1].get("role") == "user":
            if self.call_delay:
                await asyncio.sleep(self.call_delay)
            # The same arguments for the same message: a re-run is the same write.
            return tool_calls([(tool, {"title": ticket_title(marker), "priority": 2})])
        if self.holding and marker in self.partial:
            return text(answer_for(marker), stall=self.hold_limit, stall_after=1)
        if self.holding:
            await asyncio.wait_for(self.hold.wait(), self.hold_limit)
        if self.answer_delay:
            await asyncio.sleep(self.answer_delay)
        return text(answer_for(marker))


def requests_from(fake: FakeOpenAI, api_key: str) -> list[dict[str, Any]]:
    """The chat requests a given bot process sent (each process has its own API key)."""
    wanted = f"Bearer {api_key}"
    return [
        body
        for body, headers in zip(fake.requests, fake.request_headers, strict=False)
        if headers.get("Authorization") == wanted
    ]
