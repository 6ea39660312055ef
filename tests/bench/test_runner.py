"""`python -m bench`: one cheap bench end to end, and the runner's handling of benches that crash,
hang, write bad JSON, exit non-zero, or lack a flag. The misbehaving benches are tiny real modules
written here and run as real subprocesses; no expensive bench runs in CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench.runner import Bench, run_bench

ROOT = Path(__file__).resolve().parents[2]
FIGURE_KEYS = {"figure", "target", "measured", "unit", "met"}
TABLE_COLUMNS = ["figure", "target", "measured", "met"]


def test_one_cheap_bench_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "executor", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["quick"] is True
    machine = result["machine"]
    assert len(machine["load_average_start"]) == 3 and len(machine["load_average_end"]) == 3
    assert machine["reference_ms_start"] > 0 and machine["reference_ms_end"] > 0
    [bench] = result["benches"]
    assert bench["bench"] == "executor" and bench["status"] == "ok", bench
    assert len(bench["figures"]) == 3  # batches of 1, 8 and 64 calls
    for fig in bench["figures"]:
        assert set(fig) == FIGURE_KEYS
        assert isinstance(fig["figure"], str) and fig["target"] == "< 0.5 ms"
        assert isinstance(fig["measured"], float) and fig["measured"] > 0
        assert fig["unit"] == "ms" and fig["met"] is (fig["measured"] < 0.5)
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split() == ["bench", *TABLE_COLUMNS])
    body = "\n".join(lines[header:])
    for fig in bench["figures"]:
        assert fig["figure"] in body
    assert "load average" in body


def _module(directory: Path, name: str, source: str) -> None:
    (directory / f"{name}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of small bench modules, importable by the runner's subprocesses."""
    mods = tmp_path / "mods"
    mods.mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{mods}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return mods


def _logs(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    return logs


def test_a_crash_is_a_row_with_the_exit_code_and_its_last_words(
    fakes: Path, tmp_path: Path
) -> None:
    _module(fakes, "crashy", 'raise SystemExit("the bench broke here")\n')
    out = run_bench(Bench("crashy", "crashy"), quick=False, logs=_logs(tmp_path))
    assert out.status == "failed" and out.exit_code == 1
    assert "no JSON written" in out.reason and "the bench broke here" in out.reason
    assert out.figures == []
    _module(fakes, "raisy", 'print("figures soon")\nraise RuntimeError("boom in the driver")\n')
    out = run_bench(Bench("raisy", "raisy"), quick=False, logs=_logs(tmp_path))
    assert out.status == "failed"
    assert out.reason == "exit code 1, no JSON written: RuntimeError: boom in the driver"


def test_a_hung_bench_and_its_children_are_killed_at_the_timeout(
    fakes: Path, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    _module(
        fakes,
        "sleepy",
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pids)!r}, "w").write(str(child.pid))
        time.sleep(600)
        """,
    )
    out = run_bench(Bench("sleepy", "sleepy"), quick=False, logs=_logs(tmp_path), timeout=3)
    assert out.status == "timeout" and "3 s" in out.reason
    child = int(pids.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # SIGKILL is delivered, then init reaps the orphan
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the bench's child {child} outlived the timeout")


def test_bad_json_and_a_non_zero_exit_are_said(fakes: Path, tmp_path: Path) -> None:
    _module(
        fakes,
        "badjson",
        """
        import sys
        path = sys.argv[sys.argv.index("--json") + 1]
        open(path, "w").write('{"bench": "x", "figures": [{"figure": 1}]}')
        """,
    )
    _module(
        fakes,
        "missed",
        """
        import json, sys
        path = sys.argv[sys.argv.index("--json") + 1]
        fig = {"figure": "answered", "target": "all", "measured": "9/10", "unit": "", "met": False}
        json.dump({"bench": "missed", "figures": [fig]}, open(path, "w"))
        sys.exit(3)
        """,
    )
    bad = run_bench(Bench("badjson", "badjson"), quick=False, logs=_logs(tmp_path))
    assert bad.status == "failed" and "bad JSON" in bad.reason
    missed = run_bench(Bench("missed", "missed"), quick=False, logs=_logs(tmp_path))
    assert missed.status == "failed" and "exit code 3" in missed.reason
    assert missed.figures == [
        {"figure": "answered", "target": "all", "measured": "9/10", "unit": "", "met": False}
    ]


def test_what_this_machine_lacks_is_skipped_with_the_reason(fakes: Path, tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    _module(
        fakes,
        "noflag",
        f"""
        import argparse
        argparse.ArgumentParser().parse_args()
        open({str(ran)!r}, "w").write("ran")
        """,
    )
    need = run_bench(
        Bench("needy", "noflag", needs=lambda: "needs the moon"), quick=False, logs=_logs(tmp_path)
    )
    assert (need.status, need.reason) == ("skipped", "needs the moon")
    flag = run_bench(
        Bench("flagless", "noflag", requires_flags=("--replicas",)),
        quick=False,
        logs=_logs(tmp_path),
    )
    assert flag.status == "skipped" and "--replicas" in flag.reason
    assert not ran.exists()  # only --help was asked of it


def test_a_bench_missing_its_extra_is_skipped_with_its_one_line(
    fakes: Path, tmp_path: Path
) -> None:
    _module(
        fakes,
        "extraless",
        """
        from bench.needs import exit_needing
        print("starting")
        exit_needing("bench_x", "bench", "openai-agents is not installed")
        """,
    )
    out = run_bench(Bench("extraless", "extraless"), quick=False, logs=_logs(tmp_path))
    assert out.status == "skipped" and out.exit_code == 2
    assert out.reason == (
        "bench_x needs: pip install -e '.[bench]' (openai-agents is not installed)"
    )
    _module(fakes, "exit2", "import sys; sys.exit(2)")  # exit 2 without the line: a failure
    plain = run_bench(Bench("exit2", "exit2"), quick=False, logs=_logs(tmp_path))
    assert plain.status == "failed" and "exit code 2" in plain.reason
