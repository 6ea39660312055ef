"""A bench whose optional dependency is missing says so in one line and exits 2, no traceback.

A newcomer's first run is on a plain `pip install -e .`: the line names the extra that brings
what is missing, and `python -m bench` shows it as the bench's "skipped" reason.
"""

from __future__ import annotations

import sys
from typing import NoReturn

EXIT_NEEDS = 2  # what the runner reads as "skipped: <the line>"
MARK = " needs: pip install -e "


def line(bench: str, extra: str, why: str = "") -> str:
    """`bench_x needs: pip install -e '.[extra]'`, with what is missing after it when known."""
    return f"{bench}{MARK}'.[{extra}]'" + (f" ({why})" if why else "")


def exit_needing(bench: str, extra: str, why: str = "") -> NoReturn:
    print(line(bench, extra, why), file=sys.stderr, flush=True)
    raise SystemExit(EXIT_NEEDS)


def embeddings_missing() -> str | None:
    """What of the `embeddings` extra is missing (the local model's packages), or None."""
    from bot.embeddings.local import LocalUnavailable, model_files

    try:
        model_files()
    except LocalUnavailable as exc:
        return str(exc).split(" (pip install", 1)[0]  # the install command is said once
    return None


def require_embeddings(bench: str) -> None:
    """Exit with the one line when the local embedding model cannot load here."""
    why = embeddings_missing()
    if why is not None:
        exit_needing(bench, "embeddings", why)


def said_needs(output: str) -> str | None:
    """The needs line in a bench's output (the runner's skip reason), or None."""
    for text in reversed(output.splitlines()):
        if MARK in text:
            return text.strip()
    return None
