"""Markdown → mrkdwn on ordinary and hostile model output: seconds per conversion by size.

The conversion must stay linear: ten times the input should take about ten times as long. Prints
one line per case and size. Hostile inputs are the ones that used to backtrack (`*_~`` repeated,
`[` repeated, unclosed emphasis, long runs of spaces or backticks). `--json PATH` writes the
figures (and every row) as JSON.

Run: python bench/bench_mrkdwn.py [--sizes 30000,100000,1000000] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.slack.mrkdwn import TIME_BUDGET, markdown_to_mrkdwn
from bench.report import Figure, add_json_option, at_most, info, print_figures, write_json

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


def run(sizes: tuple[int, ...], budget: float, repeats: int = 3) -> list[dict[str, object]]:
    """Per case and size, the fastest of `repeats` conversions (the least disturbed by load)."""
    rows: list[dict[str, object]] = []
    for name, unit in CASES.items():
        for size in sizes:
            text = (unit * (size // len(unit) + 1))[:size]
            took = float("inf")
            for _ in range(repeats):
                started = time.perf_counter()
                out = markdown_to_mrkdwn(text, max_chars=10**9, budget=budget)
                took = min(took, time.perf_counter() - started)
            rows.append({"case": name, "chars": size, "seconds": round(took, 6), "out": len(out)})
    return rows


def figures(rows: list[dict[str, object]], sizes: tuple[int, ...], capped: float) -> list[Figure]:
    small, large = (sizes[-2], sizes[-1]) if len(sizes) > 1 else (sizes[0], sizes[0])
    secs = {(str(r["case"]), int(str(r["chars"]))): float(str(r["seconds"])) for r in rows}
    per_char = max(secs[c, large] / large for c in CASES) * 1e6
    out = [info(f"worst µs per char ({large:,} chars, no caps)", round(per_char, 3), "µs")]
    if large > small:
        # No number in the issue: reported, not judged. Backtracking was quadratic (3.3x the
        # input took 7.7x the time); CPU cache steps make a linear conversion jump 2-8x in
        # time per char between some sizes on this machine, so a ratio alone would mislead.
        growth = {c: secs[c, large] / max(secs[c, small], 1e-6) for c in CASES}
        worst = max(growth, key=lambda c: growth[c])
        name = f"worst growth {small:,}→{large:,} chars ({worst}; linear: {large / small:.3g}×)"
        out.append(info(name, round(growth[worst], 2), "×"))
    out.append(
        at_most(
            "1 MB hostile reply, default caps",
            round(capped, 3),
            TIME_BUDGET,
            "s",
            target=f"≤ {TIME_BUDGET:g} s (the time budget)",
        )
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in SIZES),
        help="comma-separated input sizes in characters",
    )
    add_json_option(parser)
    args = parser.parse_args()
    sizes = tuple(sorted({int(s) for s in args.sizes.split(",") if s.strip()}))
    rows = run(sizes, budget=10**9)  # no time budget: the conversion's own cost
    for row in rows:
        print(f"{row['case']:<32} {row['chars']:>9,} chars  {row['seconds']:>8.4f} s")
    started = time.perf_counter()
    markdown_to_mrkdwn("*_~``" * 200_000)
    capped = time.perf_counter() - started
    print(f"default caps (40,000 chars, {TIME_BUDGET:g} s budget) on 1 MB hostile: {capped:.3f} s")
    found = figures(rows, sizes, capped)
    print_figures("mrkdwn", found)
    write_json(args.json, "mrkdwn", found, {"sizes": list(sizes), "rows": rows})


if __name__ == "__main__":
    main()
