"""Small files of huge images, six at once, through a real BotApp in a child process: the
process's peak RSS (the kernel's high-water mark, which counts Pillow's C allocations) stays
within the decode budget plus a margin, and every person's turn is answered with the image
or a note saying why it was not read. Before the decode budget this case peaked at +2.9 GB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bot.files.images import DECODE_BUDGET_BYTES
from testkit.files import make_large_png

ROOT = Path(__file__).resolve().parents[2]
# The budget, plus the interpreter's, allocator's and the six files' own share.
BOUND_KB = (DECODE_BUDGET_BYTES + 96 * 1024 * 1024) // 1024


def test_six_concurrent_6320px_pngs_stay_within_the_decode_budget(tmp_path: Path) -> None:
    png = make_large_png(6320, 6320)
    assert len(png) < 200_000  # a small file: only its pixels are large (160 MB decoded)
    path = tmp_path / "big.png"
    path.write_bytes(png)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("image_memory_child.py")), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    # Every person got an answer, not an apology.
    assert [r["error"] for r in result["replies"]] == [False] * 6
    assert all(r["final"] for r in result["replies"])
    # The model saw each person's picture, or a note naming it and why it was not read.
    seen = result["seen"]
    assert len(seen) == 6
    shown = 0
    for i in range(6):
        mine = [s for s in seen if f"shot-{i}.png" in s["text"]]
        assert len(mine) == 1, (i, seen)
        if mine[0]["images"]:
            assert "6320x6320" in mine[0]["text"] and "attached below as image 1" in mine[0]["text"]
            shown += 1
        else:
            assert "busy opening other large images" in mine[0]["text"], mine[0]["text"]
    assert shown >= 1  # the budget lets decodes through, one after another
    # A plain question asked once the decodes had started was answered meanwhile (a generous
    # liveness bound: decodes run off the event loop, one at a time).
    normal = result["normal"]
    assert normal["final"] and normal["seconds"] < 10, normal
    print(
        f"a plain question took {normal['seconds']:.2f} s, "
        f"with {result['images_left_when_answered']} image turns still running"
    )

    grown_kb = result["peak_kb"] - result["base_kb"]
    print(f"peak RSS grew {grown_kb // 1024} MB for six 6320x6320 PNGs ({shown} shown)")
    assert grown_kb < BOUND_KB, f"peak grew {grown_kb // 1024} MB"
