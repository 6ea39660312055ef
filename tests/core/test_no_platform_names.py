"""The core names no platform (issue 21): outside comments and docstrings, no token of a module
under `bot/` contains "slack" or "discord". Platform rules and settings live in the adapters
(`adapters/*/traits.py`, `adapters/*/settings.py`) and reach the core as data."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "bot"
PLATFORM_WORD = re.compile(r"slack|discord", re.IGNORECASE)
_LAYOUT = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT}


def _is_docstring(tokens: list[tokenize.TokenInfo], i: int) -> bool:
    """A string token that is a statement on its own (docstrings, bare string expressions),
    possibly implicitly concatenated with neighbouring strings."""
    j = i - 1
    while j >= 0 and tokens[j].type in (tokenize.NL, tokenize.COMMENT, tokenize.STRING):
        j -= 1
    starts = j < 0 or tokens[j].type in _LAYOUT or tokens[j].string == ";"
    k = i + 1
    while k < len(tokens) and tokens[k].type in (tokenize.NL, tokenize.COMMENT, tokenize.STRING):
        k += 1
    ends = (
        k >= len(tokens)
        or tokens[k].type in (tokenize.NEWLINE, tokenize.ENDMARKER)
        or tokens[k].string == ";"
    )
    return starts and ends


def platform_names(source: str) -> list[tuple[int, str]]:
    """(line, token) for every code token naming a platform."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    found = []
    for i, tok in enumerate(tokens):
        if tok.type in _LAYOUT or (tok.type == tokenize.STRING and _is_docstring(tokens, i)):
            continue
        if PLATFORM_WORD.search(tok.string):
            found.append((tok.start[0], tok.string))
    return found


def test_the_scanner_tells_code_from_comments_and_docstrings() -> None:
    source = (
        '"""Slack module docstring."""\n'
        "# a Discord comment\n"
        "def f():\n"
        '    """Discord docstring."""\n'
        '    x = "slack"  # Slack\n'
        "    return x\n"
        "DISCORD_EPOCH = 1\n"
        'call("Discord")\n'
    )
    assert [line for line, _ in platform_names(source)] == [5, 7, 8]


def test_no_module_under_bot_names_a_platform() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{line}: {text[:60]!r}"
        for path in sorted(CORE.rglob("*.py"))
        for line, text in platform_names(path.read_text(encoding="utf-8"))
    ]
    if hits:
        pytest.fail("platform names in the core's code:\n" + "\n".join(hits))
