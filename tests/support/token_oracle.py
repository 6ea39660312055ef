"""An independent token count of a Chat Completions request, for budget tests.

A budget test that checks the bot's requests with the bot's own `TokenCounter` proves only that
the counter agrees with itself. This oracle shares no code with `bot.tokens`: it calls tiktoken
directly on the JSON body the fake server received and follows OpenAI's cookbook recipe
(`num_tokens_from_messages`): 3 tokens of framing per message, every string value of the message
(role included) encoded, 1 more for a `name`, 3 to prime the reply; tool calls by their function
name and arguments; tool schemas by their compact JSON; images by OpenAI's published tile rule;
plus the reply allowance (`max_tokens`) the request reserves.
"""

from __future__ import annotations

import base64
import io
import json
import math
from typing import Any

import tiktoken

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMER = 3


def _encoding(model: str) -> tiktoken.Encoding:
    try:
        return tiktoken.encoding_for_model(model)
    except KeyError:
        return tiktoken.get_encoding("o200k_base")


def _image_tokens(part: dict[str, Any]) -> int:
    image = part.get("image_url") or {}
    if image.get("detail") == "low":
        return 85
    from PIL import Image

    url = str(image.get("url") or "")
    raw = base64.b64decode(url.partition(",")[2])
    with Image.open(io.BytesIO(raw)) as img:
        width, height = img.size
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = min(1.0, 768 / min(width, height))
    width, height = width * scale, height * scale
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def request_tokens(request: dict[str, Any], *, reply: bool = True) -> int:
    """Prompt tokens of one request as OpenAI would bill them (approximately: the recipe's
    framing), plus its reply allowance unless `reply=False`."""
    enc = _encoding(str(request.get("model") or "gpt-4o-mini"))

    def n(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    total = REPLY_PRIMER
    for message in request.get("messages") or []:
        total += TOKENS_PER_MESSAGE
        for key, value in message.items():
            if isinstance(value, str):
                total += n(value)
                if key == "name":
                    total += TOKENS_PER_NAME
            elif key == "content" and isinstance(value, list):
                for part in value:
                    if part.get("type") == "text":
                        total += n(str(part.get("text") or ""))
                    elif part.get("type") == "image_url":
                        total += _image_tokens(part)
            elif key == "tool_calls":
                for call in value or []:
                    function = call.get("function") or {}
                    total += n(str(function.get("name") or ""))
                    total += n(str(function.get("arguments") or ""))
    if request.get("tools"):
        total += n(json.dumps(request["tools"], separators=(",", ":"), ensure_ascii=False))
    if reply:
        total += int(request.get("max_completion_tokens") or request.get("max_tokens") or 0)
    return total
