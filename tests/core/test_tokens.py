"""Offline token counting: the packaged rank files seed tiktoken's cache, hash-checked."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from bot.tokens import FALLBACK_ENCODING, TokenCounter, encoding_name_for

URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"

SCRIPT = """
import sys
from bot.tokens import TokenCounter
c = TokenCounter(sys.argv[1])
print(c.encoding.name, c.count("请记住我对花生过敏"), c.count("hello world"))
"""


def _run(tmp: Path, model: str) -> subprocess.CompletedProcess[str]:
    env = {"TIKTOKEN_CACHE_DIR": str(tmp), "PATH": "/usr/bin:/bin", "HOME": str(tmp)}
    # A dead proxy: on a machine that is online, a download would fail instead of hiding that
    # the cache was (or was not) seeded from the packaged file.
    env |= {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, model], env=env, capture_output=True, text=True, timeout=60
    )


def test_fresh_cache_is_seeded_offline(tmp_path: Path) -> None:
    out = _run(tmp_path, "gpt-4o-mini")
    assert out.returncode == 0, out.stderr
    name, zh, en = out.stdout.split()
    assert name == "o200k_base"
    assert int(en) == 2 and 3 <= int(zh) <= 12
    assert (tmp_path / hashlib.sha1(URL.encode()).hexdigest()).exists()


def test_corrupt_cache_file_is_replaced(tmp_path: Path) -> None:
    target = tmp_path / hashlib.sha1(URL.encode()).hexdigest()
    target.write_bytes(b"not a rank file")
    out = _run(tmp_path, "gpt-4o")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("o200k_base")
    assert target.stat().st_size > 1_000_000


@pytest.mark.parametrize(
    ("model", "encoding"),
    [("gpt-4o-mini", "o200k_base"), ("gpt-4", "cl100k_base"), ("llama3.1:8b", FALLBACK_ENCODING)],
)
def test_encoding_choice(model: str, encoding: str) -> None:
    assert encoding_name_for(model) == encoding


def test_message_and_truncate_counts() -> None:
    counter = TokenCounter("gpt-4o-mini")
    msg = {"role": "user", "content": "hello world"}
    assert counter.message(msg) == counter.count("hello world") + 4
    long = "花生" * 500
    cut = counter.truncate(long, 50)
    assert counter.count(cut) <= 50 and long.startswith(cut)


def test_tool_schemas_are_counted_by_content() -> None:
    """Counts are kept per tool list (bot.tokens.TokenCounter.tools), keyed by what the list
    says: the same list counts the same, a changed one (even in place) is counted anew."""
    import json

    import tiktoken

    def oracle(schemas: list[dict[str, object]]) -> int:
        text = json.dumps(schemas, separators=(",", ":"), ensure_ascii=False)
        return len(tiktoken.get_encoding("o200k_base").encode(text, disallowed_special=()))

    counter = TokenCounter("gpt-4o-mini")
    tool = {"type": "function", "function": {"name": "remember", "description": "Store a fact."}}
    schemas: list[dict[str, object]] = [tool]
    first = counter.tools(schemas)
    assert first == oracle(schemas) and counter.tools([dict(tool)]) == first
    tool["function"] = {"name": "remember", "description": "Store one fact about the speaker."}
    assert counter.tools(schemas) == oracle(schemas) > first
    assert counter.tools([]) == 0


def test_short_texts_counted_once_and_the_cache_stays_bounded() -> None:
    """A text counted again comes from the cache and counts the same as tiktoken says; long
    texts are never kept, and the cache holds at most TEXTS_CACHED texts."""
    import tiktoken

    from bot.tokens import SHORT_TEXT, TEXTS_CACHED

    encoding = tiktoken.get_encoding("o200k_base")

    def oracle(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    counter = TokenCounter("gpt-4o-mini")
    text = "question number 12, and a follow-up ✓"
    assert counter.count(text) == counter.count(text) == oracle(text)
    info = counter._short.cache_info()
    assert (info.hits, info.misses) == (1, 1)
    long = "word " * SHORT_TEXT
    assert counter.count(long) == oracle(long)
    assert counter._short.cache_info().currsize == 1  # the long text was not kept
    for i in range(TEXTS_CACHED * 2):
        counter.count(f"text {i}")
    assert counter._short.cache_info().currsize == TEXTS_CACHED
