"""Text files as model input: inlined whole when they fit their share of the budget, else cut.

Which part survives a cut depends on what the file is: a log keeps its **tail** (the error is at
the end: "what is wrong in this log?"); anything else keeps its head and a shorter tail (a CSV's
header row and last rows, a module's imports and its end). The cut is always said, in tokens and
bytes, so the model never mistakes a part for the whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.tokens import TokenCounter

_LOG_NAME = re.compile(r"(\.(log|out|err)(\.\d+)?$)|(^|[._-])log([._-]|$)", re.IGNORECASE)
_TIMESTAMPED = re.compile(
    r"^\W{0,3}(\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d|\d{10})"
)
HEAD_SHARE = 2 / 3  # of a cut non-log file's tokens kept from its start
_MARKER_TOKENS = 16  # the '[… 1.2 MB cut here …]' line and the joins
_CHARS_PER_TOKEN_GUESS = 6  # generous: real text averages ~4; widened if it falls short


@dataclass(frozen=True, slots=True)
class InlinedText:
    text: str  # what the model sees of the file
    shown_tokens: int
    total_tokens: int | None  # None when the file was too long to count whole (a cut)
    cut_bytes: int  # bytes of the original left out (0 = whole file shown)
    kept: str  # "all" | "tail" | "head and tail"


def looks_like_log(name: str, text: str) -> bool:
    """By name (`app.log`, `build.out`, `server-log.txt`) or by content (timestamped lines)."""
    if _LOG_NAME.search(name):
        return True
    lines = [line for line in text[:4000].splitlines() if line.strip()][:20]
    if len(lines) < 3:
        return False
    return sum(1 for line in lines if _TIMESTAMPED.match(line)) * 2 >= len(lines)


def _tail_tokens(counter: TokenCounter, text: str, max_tokens: int) -> list[int]:
    """The last `max_tokens` tokens of text, encoding only a window at its end (a 2 MB log is
    never tokenised whole)."""
    window = max_tokens * _CHARS_PER_TOKEN_GUESS
    while True:
        piece = text[-window:]
        tokens = counter.encoding.encode(piece, disallowed_special=())
        if len(tokens) > max_tokens or len(piece) == len(text):
            return tokens[-max_tokens:] if max_tokens > 0 else []
        window *= 2


def _head_tokens(counter: TokenCounter, text: str, max_tokens: int) -> list[int]:
    window = max_tokens * _CHARS_PER_TOKEN_GUESS
    while True:
        piece = text[:window]
        tokens = counter.encoding.encode(piece, disallowed_special=())
        if len(tokens) > max_tokens or len(piece) == len(text):
            return tokens[:max_tokens] if max_tokens > 0 else []
        window *= 2


def _decode(counter: TokenCounter, tokens: list[int]) -> str:
    # A cut can fall inside a UTF-8 character: drop the partial bytes, never emit U+FFFD.
    return counter.encoding.decode_bytes(tokens).decode("utf-8", "ignore")


def inline_text(counter: TokenCounter, name: str, text: str, max_tokens: int) -> InlinedText:
    """`text` fitted into `max_tokens` (CPU-bound for big files: call it off the event loop)."""
    max_tokens = max(0, max_tokens)
    size = len(text.encode("utf-8", "replace"))
    # Cheap test first: at most max_tokens characters always fit (a token has 1+ characters).
    if len(text) <= max_tokens:
        return InlinedText(text, counter.count(text), None, 0, "all")
    if len(text) <= max_tokens * _CHARS_PER_TOKEN_GUESS * 4:
        total = counter.count(text)
        if total <= max_tokens:
            return InlinedText(text, total, total, 0, "all")
    if looks_like_log(name, text):
        tail = _decode(counter, _tail_tokens(counter, text, max_tokens))
        tail = tail.split("\n", 1)[1] if "\n" in tail[:400] else tail  # start on a whole line
        shown = counter.count(tail)
        return InlinedText(tail, shown, None, size - len(tail.encode("utf-8", "replace")), "tail")
    room = max(max_tokens - _MARKER_TOKENS, 0)
    head_n = int(room * HEAD_SHARE)
    head = _decode(counter, _head_tokens(counter, text, head_n))
    tail = _decode(counter, _tail_tokens(counter, text, room - head_n))
    shown_bytes = len(head.encode("utf-8", "replace")) + len(tail.encode("utf-8", "replace"))
    cut = max(size - shown_bytes, 0)
    joined = f"{head}\n[… {human_size(cut)} cut here …]\n{tail}"
    return InlinedText(joined, counter.count(joined), None, cut, "head and tail")


def human_size(num: int) -> str:
    """1536 -> '1.5 KB'; bytes in powers of 1024, one decimal above KB."""
    if num < 1024:
        return f"{num} B"
    value = float(num)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")
