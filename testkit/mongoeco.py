"""Start mongoeco (an in-memory MongoDB-protocol server) for tests; see .ci/setup-mongoeco.sh.

mongoeco needs Python 3.13, so it runs as a subprocess of its own venv's interpreter
(`.ci-venv/mongoeco`, or env MONGOECO_PYTHON) and the tests talk to it with real PyMongo.
Known limits: keep collections to a few hundred documents and insert_many batches <= 100;
do not call server_info()/buildInfo; TTL expiry is immediate.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pymongo import MongoClient

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PYTHON = REPO / ".ci-venv" / "mongoeco" / "bin" / "python"
SERVER_SCRIPT = Path(__file__).with_name("mongoeco_server.py")
START_TIMEOUT = 30.0


class MongoecoMissing(RuntimeError):
    """The mongoeco interpreter is not installed (run .ci/setup-mongoeco.sh)."""


def mongoeco_python() -> Path:
    """The interpreter that has mongoeco installed; raises MongoecoMissing if there is none."""
    override = os.environ.get("MONGOECO_PYTHON")
    python = Path(override) if override else DEFAULT_PYTHON
    if not python.exists():
        hint = "MONGOECO_PYTHON points nowhere" if override else "run .ci/setup-mongoeco.sh"
        raise MongoecoMissing(f"mongoeco interpreter {python} not found ({hint})")
    return python


@contextmanager
def mongoeco_server(python: Path | None = None) -> Iterator[str]:
    """Run a fresh mongoeco server; yields its URI and stops it on exit."""
    # stderr goes to a file: a pipe nobody reads could fill up and stall the server.
    errors = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [str(python or mongoeco_python()), "-I", "-u", str(SERVER_SCRIPT), "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.isdigit():
            proc.kill()
            proc.wait()
            errors.seek(0)
            raise RuntimeError(f"mongoeco did not start: {line} {errors.read()[-2000:]}")
        uri = f"mongodb://127.0.0.1:{line}/?directConnection=true"
        _wait_for_ping(uri)
        yield uri
    finally:
        _stop(proc)
        errors.close()


def _wait_for_ping(uri: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    client: MongoClient[dict[str, object]] = MongoClient(uri, serverSelectionTimeoutMS=500)
    try:
        while True:
            try:
                client.admin.command("ping")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        client.close()


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.stdin is not None:
        proc.stdin.close()  # the server exits when its stdin closes
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
