"""The one record every benchmark writes with `--json PATH`, and the table `python -m bench` prints.

A bench's JSON is `{"bench": NAME, "figures": [FIGURE, ...], ...}` where a figure is
`{"figure": str, "target": str, "measured": number | str, "unit": str, "met": bool | null}`;
`met` is null where the issues state no target for that figure (or it was not measured). A
bench may add its own detailed result beside those two keys (`bench.locomo` keeps the keys its
issue fixed at the top level).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

NO_TARGET = "—"


@dataclass(frozen=True)
class Figure:
    """One measured figure beside the target the issues set for it."""

    figure: str
    target: str
    measured: float | int | str
    unit: str = ""
    met: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if isinstance(self.measured, float) and not math.isfinite(self.measured):
            out["measured"] = str(self.measured)  # JSON has no NaN/inf
        return out


def skipped(figure: str, target: str, reason: str) -> Figure:
    """A figure that could not be measured on this machine, with why."""
    return Figure(figure, target, f"skipped: {reason}", "", None)


def with_unit(text: str, unit: str) -> str:
    if not unit:
        return text
    return f"{text}{unit}" if unit in ("×", "%") else f"{text} {unit}"


def at_most(figure: str, measured: float, limit: float, unit: str, target: str = "") -> Figure:
    ok = math.isfinite(measured) and measured <= limit
    return Figure(figure, target or f"≤ {with_unit(f'{limit:g}', unit)}", measured, unit, ok)


def below(figure: str, measured: float, limit: float, unit: str, target: str = "") -> Figure:
    ok = math.isfinite(measured) and measured < limit
    return Figure(figure, target or f"< {with_unit(f'{limit:g}', unit)}", measured, unit, ok)


def at_least(figure: str, measured: float, limit: float, unit: str, target: str = "") -> Figure:
    ok = math.isfinite(measured) and measured >= limit
    return Figure(figure, target or f"≥ {with_unit(f'{limit:g}', unit)}", measured, unit, ok)


def info(figure: str, measured: float | int | str, unit: str = "") -> Figure:
    """A figure the issues ask to print but set no target for."""
    return Figure(figure, NO_TARGET, measured, unit, None)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help='write {"bench", "figures": [...]} and the detailed result as JSON to PATH',
    )


def record(
    bench: str, figures: list[Figure], detail: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"bench": bench, "figures": [f.as_dict() for f in figures]}
    out.update((k, v) for k, v in (detail or {}).items() if k not in out)
    return out


def write_json(
    path: Path | None, bench: str, figures: list[Figure], detail: dict[str, Any] | None = None
) -> None:
    if path is None:
        return
    Path(path).write_text(json.dumps(record(bench, figures, detail), indent=2) + "\n")


def fmt_measured(value: object, unit: str) -> str:
    if isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float):
        size = abs(value)
        text = (
            f"{value:,.0f}"
            if size >= 1000
            else f"{value:.1f}"
            if size >= 10
            else f"{value:.2f}"
            if size >= 1
            else f"{value:.3f}"
        )
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = str(value)
    return text if text.startswith("skipped") else with_unit(text, unit)


def fmt_met(met: object) -> str:
    return "yes" if met is True else "no" if met is False else "—"


def table(rows: list[list[str]], header: list[str], max_width: int = 60) -> str:
    """A plain-text table; cells longer than max_width are cut with an ellipsis."""
    cut = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in r] for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cut)) if cut else len(h) for i, h in enumerate(header)
    ]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cut]
    return "\n".join(out)


def print_figures(bench: str, figures: list[Figure]) -> None:
    rows = [[f.figure, f.target, fmt_measured(f.measured, f.unit), fmt_met(f.met)] for f in figures]
    print(f"\n{bench}: figures against targets")
    print(table(rows, ["figure", "target", "measured", "met"]))
