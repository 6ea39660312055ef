"""What one shared file costs the bot before the model is asked (download excluded).

Per file kind: wall time of `bot.files.prepare.prepare_files` (sniff, decode, fit to the token
share, or Pillow downscale + re-encode), the CPU it took (it runs in worker threads, off the
event loop), the largest event-loop stall seen meanwhile, and the tokens it puts in the request.
Files: a 2 MB server log, a 20 MB log, a 4000x2500 PNG screenshot, a 12-megapixel JPEG photo,
a 1,000-row CSV, a PDF. Prints a table, then one JSON line; `--json PATH` writes the figures.

The issues set no time per file; what they ask is that a file stays within its token share and
never holds the event loop (files are prepared in worker threads): those are the targets here.

Run: python bench/bench_files.py [--runs N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from PIL import Image

from bench.report import Figure, add_json_option, at_most, info, print_figures, write_json
from bot.files.intake import FileLimits
from bot.files.prepare import prepare_files
from bot.tokens import TokenCounter
from testkit.files import attachment, make_log, make_pdf, make_png

SHARE = 3000  # tokens: what an 8,000-token budget leaves a turn's files (60 % of its room)
LABELS = {
    "server.log": "2 MB log",
    "big.log": "20 MB log",
    "screenshot.png": "4000x2500 PNG screenshot",
    "photo.jpg": "12-megapixel JPEG",
    "orders.csv": "1,000-row CSV",
    "report.pdf": "PDF",
}


def _photo(width: int, height: int) -> bytes:
    img = Image.effect_mandelbrot((width, height), (-2.0, -1.2, 1.0, 1.2), 100).convert("RGB")
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


def _csv(rows: int) -> bytes:
    return ("id,name,total\n" + "".join(f"{i},c{i},{i * 3}.5\n" for i in range(rows))).encode()


async def _stall_probe(stop: asyncio.Event, worst: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        worst[0] = max(worst[0], time.perf_counter() - t - 0.001)


async def measure(name: str, data: bytes, mime: str, runs: int) -> dict[str, object]:
    counter = TokenCounter("gpt-4o-mini")
    limits = FileLimits(max_file_bytes=64 * 1024 * 1024, max_total_bytes=64 * 1024 * 1024)
    walls: list[float] = []
    cpus: list[float] = []
    stalls: list[float] = []
    tokens = 0
    for _ in range(runs):
        stop, worst = asyncio.Event(), [0.0]
        probe = asyncio.create_task(_stall_probe(stop, worst))
        await asyncio.sleep(0)
        wall, cpu = time.perf_counter(), time.process_time()
        prepared = await prepare_files(
            (attachment(name, data, mime),),
            counter=counter,
            limits=limits,
            share_tokens=SHARE,
            vision=True,
        )
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
        stop.set()
        await probe
        stalls.append(worst[0] * 1000)
        tokens = counter.message({"role": "user", "content": prepared.content("")})
    return {
        "file": name,
        "bytes": len(data),
        "wall_ms_p50": round(statistics.median(walls), 1),
        "cpu_ms_p50": round(statistics.median(cpus), 1),
        "max_loop_stall_ms": round(max(stalls), 1),
        "tokens": tokens,
    }


def figures(results: list[dict[str, object]]) -> list[Figure]:
    out: list[Figure] = []
    for r in results:
        name = LABELS.get(str(r["file"]), str(r["file"]))
        out.append(info(f"file cost, {name}: wall p50", r["wall_ms_p50"], "ms"))
    out.append(
        at_most(
            "largest file's tokens in the request",
            max(int(str(r["tokens"])) for r in results),
            SHARE,
            "tokens",
            target=f"≤ {SHARE:,} tokens (the share)",
        )
    )
    stall = max(float(str(r["max_loop_stall_ms"])) for r in results)
    out.append(info("longest event-loop stall meanwhile", stall, "ms"))
    return out


async def main(runs: int, json_path: Path | None) -> None:
    files = [
        ("server.log", make_log(2 * 1024 * 1024), "text/plain"),
        ("big.log", make_log(20 * 1024 * 1024), "text/plain"),
        ("screenshot.png", make_png(4000, 2500), "image/png"),
        ("photo.jpg", _photo(4000, 3000), "image/jpeg"),
        ("orders.csv", _csv(1000), "text/csv"),
        ("report.pdf", make_pdf(), "application/pdf"),
    ]
    # Warm-up: tiktoken's tables and Pillow's plugin imports are one-off costs.
    await measure("warm.txt", b"warm up\n", "text/plain", 1)
    await measure("warm.png", make_png(64, 64), "image/png", 1)
    results = [await measure(n, d, m, runs) for n, d, m in files]
    print(
        f"{'file':<16}{'bytes':>12}{'wall p50 ms':>13}{'cpu ms':>9}{'loop stall':>12}{'tokens':>8}"
    )
    for r in results:
        print(
            f"{r['file']:<16}{r['bytes']:>12,}{r['wall_ms_p50']:>13}{r['cpu_ms_p50']:>9}"
            f"{r['max_loop_stall_ms']:>12}{r['tokens']:>8}"
        )
    print(json.dumps({"bench": "files", "share_tokens": SHARE, "results": results}))
    found = figures(results)
    print_figures("files", found)
    write_json(json_path, "files", found, {"share_tokens": SHARE, "results": results})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    add_json_option(parser)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.json))
