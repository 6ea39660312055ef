"""The tag around text that came from memory into a context (stored facts, retrieved episodic
memories). Whatever sits inside it was already remembered: extraction strips it before reading
a conversation, so recalled text is never extracted again as a new memory (the failure that
filled one audited mem0 store with duplicates)."""

from __future__ import annotations

import re

RECALL_OPEN = "<recalled-memory>"
RECALL_CLOSE = "</recalled-memory>"
_RECALLED = re.compile(re.escape(RECALL_OPEN) + r".*?(?:" + re.escape(RECALL_CLOSE) + r"|$)", re.S)


def tag_recalled(text: str) -> str:
    return f"{RECALL_OPEN}\n{text}\n{RECALL_CLOSE}"


def strip_recalled(text: str) -> str:
    """The text without recalled spans (an unclosed tag hides the rest: fail safe)."""
    if RECALL_OPEN not in text:
        return text
    return " ".join(_RECALLED.sub(" ", text).split())
