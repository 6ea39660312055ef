"""Start-up failures a user can cause end with one clear line and no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def _run(
    args: list[str], tmp_path: Path, stdin: str = "", **env_extra: str
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS", "SLACK_", "DISCORD_"))
    }
    env.update({"BOT_DATA_DIR": str(tmp_path / "data"), "OPENAI_API_KEY": "sk-test", **env_extra})
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )


def _one_line(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("bot: ")]
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_chat_with_an_empty_channel(tmp_path: Path) -> None:
    done = _run(["chat", "--channel", ""], tmp_path, stdin="hi\n")
    _one_line(done, "--channel must not be empty")
    assert done.stderr.strip().count("\n") == 0


def test_chat_with_an_empty_user_or_thread(tmp_path: Path) -> None:
    _one_line(_run(["chat", "--user", " "], tmp_path, stdin="hi\n"), "--user")
    _one_line(_run(["chat", "--thread", ""], tmp_path, stdin="hi\n"), "--thread")


SLACK = {
    "SLACK_BOT_TOKEN": "xoxb-test",
    "SLACK_SIGNING_SECRET": "secret",
    "SLACK_API_URL": "http://127.0.0.1:9/api/",
}


def test_slack_with_its_port_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _run(
            ["slack"], tmp_path, BOT_HTTP_HOST="127.0.0.1", BOT_HTTP_PORT=str(port), **SLACK
        )
    _one_line(done, "cannot listen on", str(port), "BOT_HTTP_PORT")


def test_slack_with_mongodb_unreachable(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        done = _run(
            ["slack"],
            tmp_path,
            MONGODB_URI=f"mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=500",
            **SLACK,
        )
    _one_line(done, "cannot open the store")


def test_slack_workers_refused_in_socket_mode_and_for_bad_counts(tmp_path: Path) -> None:
    socket_mode = {**SLACK, "SLACK_APP_TOKEN": "xapp-test"}
    _one_line(
        _run(["slack", "--workers", "2"], tmp_path, **socket_mode), "Socket Mode", "--workers 1"
    )
    _one_line(_run(["slack"], tmp_path, **SLACK, BOT_WORKERS="0"), "BOT_WORKERS")
    _one_line(_run(["slack"], tmp_path, **SLACK, BOT_WORKERS="2", BOT_HTTP_PORT="0"), "port")
    done = _run(["slack", "--workers", "many"], tmp_path, **SLACK)
    assert done.returncode == 2 and "--workers" in done.stderr and "Traceback" not in done.stderr


def test_slack_workers_whose_port_is_taken_stop_with_exit_2(tmp_path: Path) -> None:
    """A worker's configuration error ends the supervisor (restarting would not help)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = _run(
            ["slack", "--workers", "2"],
            tmp_path,
            **SLACK,
            BOT_HTTP_HOST="127.0.0.1",
            BOT_HTTP_PORT=port,
        )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


def test_bot_workers_is_not_discords_setting(tmp_path: Path) -> None:
    """BOT_WORKERS (in a .env shared with `bot slack`) leaves `bot discord` one process: it
    starts as ever, here up to its own one-line refusal of a missing token."""
    done = _run(["discord"], tmp_path, BOT_WORKERS="2")
    _one_line(done, "DISCORD_TOKEN")
