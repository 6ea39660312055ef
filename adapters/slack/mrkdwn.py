"""Markdown (what models write) to Slack mrkdwn (what chat.postMessage renders), and splitting.

Slack's `text` field is not Markdown: bold is `*x*`, links are `<url|label>`, there are no
headings or tables, and `&`, `<`, `>` must be escaped. The streaming API takes real Markdown, so
this is only used for posted/updated messages and command replies.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_left
from collections.abc import Callable

from adapters.common.split import split_message as common_split

# Every pattern here runs in time linear in the line (no nested or adjacent ambiguous
# quantifiers, no lazy scan to a closing delimiter): emphasis and code spans are paired with
# precomputed delimiter positions instead (see `_pair`), so no model output can make the
# conversion quadratic. `bench/bench_mrkdwn.py` prints the figures.

# An opening/closing fence line: three or more backticks or tildes and an optional info string
# (no backtick in it, so "```npm install```" on one line is inline code, not a fence).
_FENCE = re.compile(r"^\s*+(`{3,}+|~{3,}+)[^`]*+$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*+\1){2,}+\s*+$")
_BULLET = re.compile(r"^(\s*+)[-*+]\s++(.*)$")
_QUOTE = re.compile(r"^(\s*+>++\s?)(.*)$")
_TABLE_SEP = re.compile(r"^\s*+\|?\s*+:?-{3,}+:?\s*+(?:\|\s*+:?-{3,}+:?\s*+)*+\|?\s*+$")

# Slack's own tokens the model may echo back: keep them verbatim.
_SLACK_TOKEN = re.compile(r"<(?:[@#!][^<>\s]++|(?:https?|mailto|tel):[^<>\s|]++(?:\|[^<>]*+)?)>")
# URLs may hold one level of balanced parentheses (Wikipedia: .../Python_(programming_language)).
_URL_PART = r"(?:[^()\s>\[\]]|\([^()\s>]*+\))+"
# Labels hold no brackets: from each "[" the scan stops at the next one (linear on "[[[[").
_IMAGE = re.compile(r"!\[([^\[\]]*+)\]\(\s*+<?(" + _URL_PART + r")>?(?:\s++\"[^\"]*+\")?\s*+\)")
_LINK = re.compile(r"\[([^\[\]]++)\]\(\s*+<?(" + _URL_PART + r")>?(?:\s++\"[^\"]*+\")?\s*+\)")
_URL_START = re.compile(r"https?://")
_URL_BODY = re.compile(r"(?:[^\s<>()]|\([^\s<>()]*+\))*(?:[^\s<>().,;:!?'\"]|\([^\s<>()]*+\))")
_BACKTICKS = re.compile(r"`+")

_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(_PH_OPEN + r"(\d+)" + _PH_CLOSE)
_BOLD_MARK = "\ue002"

MAX_CONVERT_CHARS = 40_000  # beyond this, text is only escaped (long answers become files)
TIME_BUDGET = 0.1  # seconds of conversion per call before the rest is only escaped


def escape(text: str) -> str:
    """Escape the three characters Slack treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link_label(label: str) -> str:
    return escape(label.replace("|", "/").replace("*", "").replace("`", "")).strip()


class _Protected:
    """Fragments already in final form, swapped out so later rules cannot touch them."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def keep(self, fragment: str) -> str:
        self.items.append(fragment)
        return f"{_PH_OPEN}{len(self.items) - 1}{_PH_CLOSE}"

    def restore(self, text: str) -> str:
        # Placeholders can nest (a link label holding code), so restore until stable.
        for _ in range(4):
            if _PH_OPEN not in text:
                break
            text = _PLACEHOLDER.sub(lambda m: self.items[int(m.group(1))], text)
        return text


def _inline(text: str) -> str:
    protected = _Protected()
    text = _code_spans(text, protected)
    text = _SLACK_TOKEN.sub(lambda m: protected.keep(m.group(0)), text)
    text = _IMAGE.sub(
        lambda m: protected.keep(f"<{_url(m.group(2))}|{_link_label(m.group(1)) or 'image'}>"),
        text,
    )
    text = _LINK.sub(lambda m: protected.keep(_render_link(m.group(1), m.group(2))), text)
    text = _bare_urls(text, protected)
    text = escape(text)
    text = _bold(text)
    text = _italic(text)
    text = _strike(text)
    text = text.replace(_BOLD_MARK, "*")
    return protected.restore(text)


def _code_spans(text: str, protected: _Protected) -> str:
    """`code`: a backtick run closed by the next run of the same length (as CommonMark)."""
    if "`" not in text:
        return text
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text)]
    by_length: dict[int, list[int]] = {}
    for index, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, []).append(index)
    out: list[str] = []
    pos = 0
    index = 0
    while index < len(runs):
        start, end = runs[index]
        same = by_length[end - start]
        k = bisect_left(same, index + 1)
        if k == len(same):
            index += 1
            continue
        close = same[k]
        c_start, c_end = runs[close]
        out.append(text[pos:start])
        out.append(protected.keep("`" + escape(text[end:c_start]) + "`"))
        pos = c_end
        index = close + 1
    out.append(text[pos:])
    return "".join(out)


def _bare_urls(text: str, protected: _Protected) -> str:
    """http(s) URLs not already inside `<...>`, a link or parentheses become `<url>`."""
    out: list[str] = []
    pos = 0
    search = 0
    while m := _URL_START.search(text, search):
        start = m.start()
        before = text[start - 1] if start else ""
        if before in ("<", "|", "(") or before.isalnum() or before == "_":
            search = m.end()
            continue
        body = _URL_BODY.match(text, m.end())
        if body is None:
            search = m.end()
            continue
        out.append(text[pos:start])
        out.append(protected.keep(f"<{_url(text[start : body.end()])}>"))
        pos = search = body.end()
    out.append(text[pos:])
    return "".join(out)


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _pair(
    text: str,
    openers: list[tuple[int, str]],
    closers: dict[str, list[int]],
    width: int,
    render: Callable[[str], str],
) -> str:
    """Replace each opener (position, marker) and the first closer of its marker at least one
    character later, left to right, like a lazy regex but with a binary search per opener."""
    out: list[str] = []
    pos = 0
    for start, marker in openers:
        if start < pos:
            continue
        ends = closers.get(marker, [])
        k = bisect_left(ends, start + width + 1)
        if k == len(ends):
            continue
        end = ends[k]
        out.append(text[pos:start])
        out.append(render(text[start + width : end]))
        pos = end + width
    out.append(text[pos:])
    return "".join(out)


def _bold(text: str) -> str:
    """**x** and __x__ (no space just inside the markers) become the bold mark."""
    if "**" not in text and "__" not in text:
        return text
    n = len(text)
    openers: list[tuple[int, str]] = []
    closers: dict[str, list[int]] = {"**": [], "__": []}
    for i in range(n - 1):
        pair = text[i : i + 2]
        if pair not in closers:
            continue
        if i + 2 < n and not text[i + 2].isspace():
            openers.append((i, pair))
        if i > 0 and not text[i - 1].isspace():
            closers[pair].append(i)
    return _pair(text, openers, closers, 2, lambda inner: f"{_BOLD_MARK}{inner}{_BOLD_MARK}")


def _italic(text: str) -> str:
    """*x* (a lone star, not inside a word) becomes _x_."""
    if "*" not in text:
        return text
    n = len(text)
    openers: list[tuple[int, str]] = []
    closers: dict[str, list[int]] = {"*": []}
    for i, char in enumerate(text):
        if char != "*":
            continue
        prev = text[i - 1] if i else ""
        nxt = text[i + 1] if i + 1 < n else ""
        if prev != "*" and not _is_word(prev) and nxt and nxt != "*" and not nxt.isspace():
            openers.append((i, "*"))
        if prev and prev != "*" and not prev.isspace() and nxt != "*" and not _is_word(nxt):
            closers["*"].append(i)
    return _pair(text, openers, closers, 1, lambda inner: f"_{inner}_")


def _strike(text: str) -> str:
    """~~x~~ becomes ~x~."""
    if "~~" not in text:
        return text
    n = len(text)
    openers: list[tuple[int, str]] = []
    closers: dict[str, list[int]] = {"~~": []}
    start = text.find("~~")
    while start != -1:
        if start + 2 < n and not text[start + 2].isspace():
            openers.append((start, "~~"))
        if start > 0 and not text[start - 1].isspace():
            closers["~~"].append(start)
        start = text.find("~~", start + 1)
    return _pair(text, openers, closers, 2, lambda inner: f"~{inner}~")


def _url(url: str) -> str:
    """URLs inside `<...>` are escaped like text (Slack unescapes them when rendering)."""
    return url.replace("&amp;", "&").replace("&", "&amp;")


def _render_link(label: str, url: str) -> str:
    if not url.startswith(("http:", "https:", "mailto:", "tel:")):
        return escape(f"{label} ({url})")
    shown = _link_label(label)
    return f"<{_url(url)}|{shown}>" if shown and shown != url else f"<{_url(url)}>"


def _table(rows: list[str]) -> list[str]:
    """Slack has no tables: render them monospaced, without the separator row."""
    body = [escape(r.strip()) for r in rows if not _TABLE_SEP.match(r)]
    return ["```", *body, "```"]


def markdown_to_mrkdwn(
    markdown: str, *, max_chars: int = MAX_CONVERT_CHARS, budget: float = TIME_BUDGET
) -> str:
    """Convert CommonMark-ish model output to Slack mrkdwn, leaving code blocks intact.

    Linear in the input; still, beyond `max_chars` characters or `budget` seconds the rest is
    only escaped (plain text), so a huge or hostile answer can never hold the event loop.
    """
    out: list[str] = []
    text = markdown.replace("\r\n", "\n")
    rest = ""
    if len(text) > max_chars:
        cut = text.rfind("\n", 0, max_chars) + 1 or max_chars
        text, rest = text[:cut], text[cut:]
    lines = text.split("\n")
    fence: str | None = None  # the opening fence while inside a code block
    deadline = time.perf_counter() + budget
    i = 0
    while i < len(lines):
        if i % 64 == 63 and time.perf_counter() > deadline:
            rest = "\n".join(lines[i:]) + ("\n" + rest if rest else "")
            break
        line = lines[i]
        if fence is None and (one := _one_line_fence(line)) is not None:
            out.extend(["```", escape(one.strip()), "```"])
            i += 1
            continue
        if m := _FENCE.match(line):
            marker = m.group(1)
            if fence is None:
                fence = marker
                out.append("```")
                i += 1
                continue
            # Only a fence of the same character, at least as long, and bare closes the block.
            if (
                marker[0] == fence[0]
                and len(marker) >= len(fence)
                and not line.strip()[len(marker) :]
            ):
                fence = None
                out.append("```")
                i += 1
                continue
        if fence is not None:
            out.append(escape(line))
            i += 1
            continue
        if _table_row(line) and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]):
            rows = []
            while i < len(lines) and (_table_row(lines[i]) or _TABLE_SEP.match(lines[i])):
                rows.append(lines[i])
                i += 1
            out.extend(_table(rows))
            continue
        out.append(_block_line(line))
        i += 1
    if fence is not None:
        out.append("```")
    converted = "\n".join(out).strip("\n")
    if rest:
        converted += "\n" + escape(rest)
    return converted


def _one_line_fence(line: str) -> str | None:
    """The code of a line like ```npm install``` (same run of 3+ backticks both ends)."""
    stripped = line.strip()
    width = len(stripped) - len(stripped.lstrip("`"))
    if width < 3 or len(stripped) <= 2 * width or stripped[width] == "`":
        return None
    if not stripped.endswith("`" * width):
        return None
    return stripped[width:-width]


def _table_row(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 2 and stripped[0] == "|" and stripped[-1] == "|"


def _block_line(line: str) -> str:
    if m := _HEADING.match(line):
        title = m.group(2).rstrip().rstrip("#").rstrip()
        title = _bold(title).replace(_BOLD_MARK, "")
        return f"*{_inline(title)}*" if title else ""
    if _RULE.match(line):
        return "──────────"
    if m := _BULLET.match(line):
        depth = len(m.group(1).replace("\t", "  ")) // 2
        bullet = "•" if depth == 0 else "◦"
        return f"{'    ' * depth}{bullet} {_inline(m.group(2))}"
    if m := _QUOTE.match(line):
        return ">" + " " + _inline(m.group(2))
    return _inline(line)


def _safe_cut(text: str, limit: int) -> int:
    """Index at most `limit` to cut at: a paragraph, line or word boundary, not inside `<...>`."""
    window = text[:limit]
    cut = -1
    for sep in ("\n\n", "\n", " "):
        pos = window.rfind(sep)
        if pos >= limit // 2:
            cut = pos + len(sep)
            break
    if cut <= 0:
        cut = limit
    opened, closed = text.rfind("<", 0, cut), text.rfind(">", 0, cut)
    if opened > closed and opened > 0:
        cut = opened
    return cut


def split_message(text: str, limit: int) -> list[str]:
    """Split mrkdwn into parts of at most `limit` characters, re-opening code fences, never
    cutting a `<...>` token (the one splitter, `adapters.common.split`)."""
    return common_split(text, limit, angle_tokens=True)


def truncate(text: str, limit: int, marker: str = " …") -> str:
    """Shorten for a preview without breaking a `<...>` token; closes an open code fence."""
    if len(text) <= limit:
        return text
    cut = _safe_cut(text, limit - len(marker) - 4)
    head = text[:cut].rstrip()
    if head.count("```") % 2 == 1:
        head += "\n```"
    return head + marker
