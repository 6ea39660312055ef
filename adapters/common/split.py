"""Split a long Markdown reply into messages under a platform's size limit.

Cuts at a paragraph break if there is one in the second half of the budget, else at a line
break, else at a space, else hard. A part never leaves a code fence open: when a cut falls inside
a fenced block, the part closes it and the next part reopens it with the same language, so each
message renders on its own. Parts are never empty (platforms reject empty messages).
"""

from __future__ import annotations

FENCE = "```"
_CLOSE = "\n" + FENCE


def open_fence(text: str) -> str | None:
    """The language of the code fence left open at the end of `text` ("" for a bare fence), or
    None when every fence is closed. A fence is a line starting with ``` (indent allowed)."""
    lang: str | None = None
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped.startswith(FENCE):
            continue
        if lang is None:
            rest = stripped[len(FENCE) :]
            if rest.endswith(FENCE) and len(rest) >= len(FENCE):
                continue  # ```one-line block``` opens and closes on the same line
            lang = rest.strip().split(" ")[0] if rest.strip() else ""
        else:
            lang = None
    return lang


def close_fence(text: str) -> str:
    """`text` with a closing fence appended if it leaves one open (for streamed previews)."""
    return text + _CLOSE if open_fence(text) is not None else text


def _cut(text: str, budget: int, angle_tokens: bool) -> int:
    window = text[:budget]
    half = budget // 2
    cut = budget
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at >= half or (sep == " " and at > 0):
            cut = at + len(sep) if sep == " " else at
            break
    if angle_tokens:  # never inside a `<...>` token (Slack's links and mentions)
        opened, closed = text.rfind("<", 0, cut), text.rfind(">", 0, cut)
        if opened > closed and opened > 0:
            cut = opened
    return cut


def split_message(text: str, limit: int = 2000, *, angle_tokens: bool = False) -> list[str]:
    """Parts of at most `limit` characters whose concatenation keeps all of `text`'s words.
    `angle_tokens`: a cut never falls inside `<...>` (Slack's mrkdwn links and mentions)."""
    if limit < 64:
        raise ValueError("limit too small")
    parts: list[str] = []
    rest = text.strip("\n")
    while len(rest) > limit:
        reopen = ""
        budget = limit - len(_CLOSE)
        cut = max(1, _cut(rest, budget, angle_tokens))
        head, tail = rest[:cut].rstrip(), rest[cut:].lstrip("\n")
        last_line = head.rsplit("\n", 1)[-1].strip()
        if last_line.startswith(FENCE) and open_fence(head) is not None and "\n" in head:
            # do not end a part on the opening line of a block: move that line to the next part
            line_start = head.rfind("\n")
            tail = head[line_start + 1 :] + "\n" + tail
            head = head[:line_start].rstrip()
        lang = open_fence(head)
        if lang is not None:
            head += _CLOSE
            reopen = f"{FENCE}{lang}\n"
        if head.strip():
            parts.append(head)
        if len(reopen) + len(tail) <= len(rest) or not reopen:
            rest = reopen + tail
        else:  # a pathological fence line longer than the limit: give up reopening it
            rest = tail
    if rest.strip():
        parts.append(rest)
    return parts or ["…"]
