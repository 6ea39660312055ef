"""Markdown (what models write) to Slack mrkdwn (what chat.postMessage renders), and splitting.

Slack's `text` field is not Markdown: bold is `*x*`, links are `<url|label>`, there are no
headings or tables, and `&`, `<`, `>` must be escaped. The streaming API takes real Markdown, so
this is only used for posted/updated messages and command replies.
"""

from __future__ import annotations

import re

# An opening/closing fence line: three or more backticks or tildes and an optional info string
# (no backtick in it, so "```npm install```" on one line is inline code, not a fence).
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})[^`]*$")
_ONE_LINE_FENCE = re.compile(r"^\s*(`{3,})([^`].*?)\1\s*$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_QUOTE = re.compile(r"^(\s*>+\s?)(.*)$")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")

# Slack's own tokens the model may echo back: keep them verbatim.
_SLACK_TOKEN = re.compile(r"<(?:[@#!][^<>\s]+|(?:https?|mailto|tel):[^<>\s|]+(?:\|[^<>]*)?)>")
# URLs may hold one level of balanced parentheses (Wikipedia: .../Python_(programming_language)).
_URL_PART = r"(?:[^()\s>]|\([^()\s>]*\))+"
_IMAGE = re.compile(r"!\[([^\]]*)\]\(\s*<?(" + _URL_PART + r")>?(?:\s+\"[^\"]*\")?\s*\)")
_LINK = re.compile(r"\[([^\]]+)\]\(\s*<?(" + _URL_PART + r")>?(?:\s+\"[^\"]*\")?\s*\)")
_BARE_URL = re.compile(
    r"(?<![<|(])\bhttps?://(?:[^\s<>()]|\([^\s<>()]*\))+(?:[^\s<>().,;:!?'\"]|\([^\s<>()]*\))"
)
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC_STAR = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")

_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(_PH_OPEN + r"(\d+)" + _PH_CLOSE)
_BOLD_MARK = "\ue002"


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
    text = _INLINE_CODE.sub(lambda m: protected.keep("`" + escape(m.group(2)) + "`"), text)
    text = _SLACK_TOKEN.sub(lambda m: protected.keep(m.group(0)), text)
    text = _IMAGE.sub(
        lambda m: protected.keep(f"<{_url(m.group(2))}|{_link_label(m.group(1)) or 'image'}>"),
        text,
    )
    text = _LINK.sub(lambda m: protected.keep(_render_link(m.group(1), m.group(2))), text)
    text = _BARE_URL.sub(lambda m: protected.keep(f"<{_url(m.group(0))}>"), text)
    text = escape(text)
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC_STAR.sub(lambda m: f"_{m.group(1)}_", text)
    text = _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    text = text.replace(_BOLD_MARK, "*")
    return protected.restore(text)


def _url(url: str) -> str:
    """URLs inside `<...>` are escaped like text (Slack unescapes them when rendering)."""
    return url.replace("&amp;", "&").replace("&", "&amp;")


def _render_link(label: str, url: str) -> str:
    if not re.match(r"^(https?|mailto|tel):", url):
        return escape(f"{label} ({url})")
    shown = _link_label(label)
    return f"<{_url(url)}|{shown}>" if shown and shown != url else f"<{_url(url)}>"


def _table(rows: list[str]) -> list[str]:
    """Slack has no tables: render them monospaced, without the separator row."""
    body = [escape(r.strip()) for r in rows if not _TABLE_SEP.match(r)]
    return ["```", *body, "```"]


def markdown_to_mrkdwn(markdown: str) -> str:
    """Convert CommonMark-ish model output to Slack mrkdwn, leaving code blocks intact."""
    out: list[str] = []
    lines = markdown.replace("\r\n", "\n").split("\n")
    fence: str | None = None  # the opening fence while inside a code block
    i = 0
    while i < len(lines):
        line = lines[i]
        if fence is None and (one := _ONE_LINE_FENCE.match(line)):
            out.extend(["```", escape(one.group(2).strip()), "```"])
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
        if _TABLE_ROW.match(line) and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]):
            rows = []
            while i < len(lines) and (_TABLE_ROW.match(lines[i]) or _TABLE_SEP.match(lines[i])):
                rows.append(lines[i])
                i += 1
            out.extend(_table(rows))
            continue
        out.append(_block_line(line))
        i += 1
    if fence is not None:
        out.append("```")
    return "\n".join(out).strip("\n")


def _block_line(line: str) -> str:
    if m := _HEADING.match(line):
        title = _BOLD.sub(lambda b: b.group(2), m.group(2))
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
    """Split mrkdwn into parts of at most `limit` characters, re-opening code fences."""
    if limit < 32:
        raise ValueError("limit too small")
    parts: list[str] = []
    rest = text
    while len(rest) > limit:
        budget = limit - 8  # room to close and reopen a code fence
        cut = _safe_cut(rest, budget)
        head, rest = rest[:cut].rstrip(), rest[cut:].lstrip("\n")
        if head.count("```") % 2 == 1:
            head += "\n```"
            rest = "```\n" + rest
        if head.strip():
            parts.append(head)
    if rest.strip():
        parts.append(rest)
    return parts or [""]


def truncate(text: str, limit: int, marker: str = " …") -> str:
    """Shorten for a preview without breaking a `<...>` token; closes an open code fence."""
    if len(text) <= limit:
        return text
    cut = _safe_cut(text, limit - len(marker) - 4)
    head = text[:cut].rstrip()
    if head.count("```") % 2 == 1:
        head += "\n```"
    return head + marker
