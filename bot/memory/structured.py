"""Asking a model for JSON, the way session summaries do: a strict JSON schema first; servers
that reject it (some local OpenAI-compatible ones) get JSON mode, then a plain request, and the
reply is parsed leniently (a code fence or prose around the object is fine). The first form a
server accepted is remembered, so later calls cost one request. No tools are offered."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from bot.model import ModelError, ModelResponse

log = logging.getLogger(__name__)


class JsonModel(Protocol):
    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        response_format: dict[str, Any] | None = ...,
        max_tokens: int | None = ...,
    ) -> ModelResponse: ...


@dataclass
class JsonAnswer:
    data: dict[str, Any]
    tokens: int  # prompt + completion, as the endpoint reported them (0 when it did not)


def json_schema_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def parse_json_object(raw: str) -> dict[str, Any]:
    """The JSON object in `raw`, also when wrapped in prose or a code fence. ValueError if none."""
    try:
        data = json.loads(raw)
    except ValueError:
        start, end = raw.find("{"), raw.rfind("}")
        if start < 0 or end <= start:
            raise ValueError("no JSON object in the model's answer") from None
        data = json.loads(raw[start : end + 1])
    if not isinstance(data, dict):
        raise ValueError("the model's JSON is not an object")
    return data


class JsonAsker:
    """Ask `model` for an object fitting `schema`; one instance per kind of request."""

    def __init__(self, model: JsonModel, *, max_tokens: int = 600) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self._format = 0  # index of the form the server accepts

    async def ask(
        self, messages: list[dict[str, Any]], name: str, schema: dict[str, Any]
    ) -> JsonAnswer:
        """Raises ModelError (after the SDK's retries) or ValueError for an unusable answer."""
        formats: list[dict[str, Any] | None] = [
            json_schema_format(name, schema),
            {"type": "json_object"},
            None,
        ]
        for i in range(self._format, len(formats)):
            try:
                response = await self.model.complete(
                    messages, response_format=formats[i], max_tokens=self.max_tokens
                )
            except ModelError as err:
                if err.kind != "bad_request" or i == len(formats) - 1:
                    raise
                log.info(
                    "json_format_rejected",
                    extra={"fields": {"task": name, "format": (formats[i] or {}).get("type")}},
                )
                continue
            self._format = i
            usage = response.usage
            return JsonAnswer(
                parse_json_object(response.content), usage.total_tokens if usage else 0
            )
        raise AssertionError("unreachable")
