"""What the real Chat Completions API refuses with 400, as rules the fake server applies.

A fake that accepts anything proves nothing: a bot that sends a `tool` message nobody asked for,
or forgets to answer a tool call, would pass every test and fail against OpenAI. Each rule is a
function `(request body) -> Rejection | None`; `FakeOpenAI.rules` runs them in order and answers
the first rejection with 400 in OpenAI's error shape (message, type, param, code as the real API
words them). Rules compose: add one to the tuple, or build one with a factory such as
`image_parts_need_vision(models)`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

KNOWN_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


@dataclass(frozen=True, slots=True)
class Rejection:
    """A 400 `invalid_request_error` with the real API's wording."""

    message: str
    param: str | None = None
    code: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": self.param,
                "code": self.code,
            }
        }


Rule = Callable[[dict[str, Any]], Rejection | None]


def _messages(body: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    for index, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict):
            yield index, message


def known_roles(body: dict[str, Any]) -> Rejection | None:
    """Every message has one of the roles the API knows."""
    for i, message in _messages(body):
        role = message.get("role")
        if role not in KNOWN_ROLES:
            return Rejection(
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                "'function', 'tool', and 'developer'.",
                f"messages.[{i}].role",
                "invalid_value",
            )
    return None


def _call_ids(message: dict[str, Any]) -> list[str]:
    calls = message.get("tool_calls") or []
    return [str(c.get("id")) for c in calls if isinstance(c, dict)]


def tool_messages_answer_announced_calls(body: dict[str, Any]) -> Rejection | None:
    """A `tool` message follows an assistant message with `tool_calls` (or other tool messages
    after it), and its `tool_call_id` is one that assistant message announced."""
    announced: list[str] | None = None  # ids of the tool-call block we are in, if any
    for i, message in _messages(body):
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            announced = _call_ids(message)
            continue
        if role != "tool":
            announced = None
            continue
        if announced is None:
            return Rejection(
                "Invalid parameter: messages with role 'tool' must be a response to a "
                "preceeding message with 'tool_calls'.",
                f"messages.[{i}].role",
            )
        call_id = message.get("tool_call_id")
        if call_id not in announced:
            return Rejection(
                f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of "
                "previous message.",
                f"messages.[{i}].tool_call_id",
            )
    return None


def tool_calls_are_answered(body: dict[str, Any]) -> Rejection | None:
    """An assistant message with `tool_calls` is followed by one `tool` message per call."""
    messages = list(_messages(body))
    for position, (i, message) in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        answered: list[str] = []
        for _, after in messages[position + 1 :]:
            if after.get("role") != "tool":
                break
            answered.append(str(after.get("tool_call_id")))
        missing = [c for c in _call_ids(message) if c not in answered]
        if missing:
            return Rejection(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(missing)}",
                f"messages.[{i}].role",
            )
    return None


def image_parts_need_vision(text_only_models: Collection[str]) -> Rule:
    """A rule: the models named refuse `image_url` content parts, as OpenAI's text-only do."""

    def rule(body: dict[str, Any]) -> Rejection | None:
        if body.get("model") not in text_only_models:
            return None
        for i, message in _messages(body):
            content = message.get("content")
            for p, part in enumerate(content if isinstance(content, list) else []):
                if isinstance(part, dict) and part.get("type") == "image_url":
                    return Rejection(
                        "Invalid content type. image_url is only supported by certain models.",
                        f"messages.[{i}].content.[{p}].type",
                    )
        return None

    return rule


CONVERSATION_RULES: tuple[Rule, ...] = (
    known_roles,
    tool_messages_answer_announced_calls,
    tool_calls_are_answered,
)
"""The rules every model applies, whatever it is configured to accept."""


def first_rejection(body: dict[str, Any], rules: Collection[Rule]) -> Rejection | None:
    for rule in rules:
        rejection = rule(body)
        if rejection is not None:
            return rejection
    return None
