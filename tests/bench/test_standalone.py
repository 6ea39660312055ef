"""The benches run on a plain `pip install -e .` (issue 26): nothing in bench/ or testkit/ imports
`tests` or pytest, `python -m bench --list` works with both unimportable, and a bench whose extra
is missing says which in one line and exits 2 instead of a traceback."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.runner import BENCHES

ROOT = Path(__file__).resolve().parents[2]
TEST_ONLY = {"tests", "pytest", "_pytest", "hypothesis", "pytest_asyncio"}

# Run in a child interpreter before anything else: `tests` and the test extra's packages cannot
# be imported (as in a plain install), nor the modules named in sys.argv[1] (a missing extra).
PRELUDE = """
import importlib.abc, runpy, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {refused!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (refused)", name=name)
        return None

sys.meta_path.insert(0, Refuse())
for name in sys.argv[1].split(","):
    if name:
        sys.modules[name] = None  # find_spec() says None too: the extra is not installed
module, sys.argv = sys.argv[2], sys.argv[2:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def _run(module: str, *args: str, missing: str = "") -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(PRELUDE.format(refused=TEST_ONLY))
    return subprocess.run(
        [sys.executable, "-c", code, missing, module, *args],
        cwd=ROOT,  # where `tests` would be importable, were it not refused
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.partition(".")[0])
    return roots


@pytest.mark.parametrize("package", ["bench", "testkit"])
def test_no_module_imports_tests_or_pytest(package: str) -> None:
    """Imports inside functions count too (bench_slack imports its fakes lazily)."""
    found = {
        str(path.relative_to(ROOT)): sorted(_imported_roots(path) & TEST_ONLY)
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {path: roots for path, roots in found.items() if roots} == {}


def test_bench_list_runs_without_tests_and_pytest() -> None:
    done = _run("bench", "--list")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    assert listed == [b.name for b in BENCHES]


@pytest.mark.parametrize(
    ("module", "args", "missing", "line"),
    [
        ("bench.bench_memory", (), "agents", "bench_memory needs: pip install -e '.[bench]'"),
        (
            "bench.bench_embeddings",
            (),
            "onnxruntime",
            "bench_embeddings needs: pip install -e '.[embeddings]'",
        ),
        (
            "bench.locomo",
            ("--data", "unread.json", "--embedder", "local"),
            "onnxruntime",
            "locomo needs: pip install -e '.[embeddings]'",
        ),
    ],
)
def test_a_missing_extra_is_one_line_and_exit_2(
    module: str, args: tuple[str, ...], missing: str, line: str
) -> None:
    done = _run(module, *args, missing=missing)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [said] = done.stderr.strip().splitlines()
    assert said.startswith(line), said
