"""Markdown → mrkdwn on ordinary and hostile model output: seconds per conversion by size.

The conversion must stay linear: doubling the input should about double the time. Prints one
line per case and size, and JSON with `--json`. Hostile inputs are the ones that used to
backtrack (`*_~`` repeated, `[` repeated, unclosed emphasis, long runs of spaces or backticks).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.slack.mrkdwn import markdown_to_mrkdwn

ORDINARY = (
    "## Order status\n\nYour order **#W2611340** is *on its way*: see "
    "[tracking](https://example.com/t?id=1&x=(2)) or https://example.com/x.\n"
    "- item `sku-1` ~~cancelled~~\n| a | b |\n|---|---|\n| 1 | 2 |\n```py\nprint(1)\n```\n"
)
CASES = {
    "ordinary": ORDINARY,
    "star_underscore_tilde_backtick": "*_~``",
    "open_brackets": "[",
    "unclosed_bold": "**a ",
    "unclosed_italic": "*a ",
    "links_without_close": "[a](x ",
    "urls": "http://",
    "backticks_and_text": "``a",
    "spaces_then_char": " ",
    "heading_spaces": "# " + " " * 50,
    "table_like": "|---",
}
SIZES = (30_000, 100_000, 1_000_000)


def run(budget: float) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name, unit in CASES.items():
        for size in SIZES:
            text = (unit * (size // len(unit) + 1))[:size]
            started = time.perf_counter()
            out = markdown_to_mrkdwn(text, max_chars=10**9, budget=budget)
            took = time.perf_counter() - started
            rows.append({"case": name, "chars": size, "seconds": round(took, 4), "out": len(out)})
    return rows


def main() -> None:
    as_json = "--json" in sys.argv
    rows = run(budget=10**9)  # no time budget: the conversion's own cost
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    for row in rows:
        print(f"{row['case']:<32} {row['chars']:>9,} chars  {row['seconds']:>8.4f} s")
    started = time.perf_counter()
    markdown_to_mrkdwn("*_~``" * 200_000)
    print(
        f"default caps (40,000 chars, 0.1 s budget) on 1 MB hostile: "
        f"{time.perf_counter() - started:.3f} s"
    )


if __name__ == "__main__":
    main()
