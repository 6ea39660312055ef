"""`bot slack` / `bot discord` dispatch to each adapter's own start-up (`adapters.<x>.main`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _run(command: str, tmp_path: Path, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS", "SLACK_", "DISCORD_"))
    }
    env.update({"BOT_DATA_DIR": str(tmp_path / "data"), "OPENAI_API_KEY": "sk-test", **env_extra})
    return subprocess.run(
        [sys.executable, "-m", "bot", command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )


def test_slack_without_credentials_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    done = _run("slack", tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SLACK_SIGNING_SECRET" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # settings are checked before any store is opened


def test_discord_without_a_token_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    done = _run("discord", tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "DISCORD_TOKEN" in lines[0], done.stderr
    assert not (tmp_path / "data").exists()


def test_discord_with_a_malformed_gateway_url_is_one_line(tmp_path: Path) -> None:
    done = _run("discord", tmp_path, DISCORD_TOKEN="t", DISCORD_GATEWAY_URL="http://x")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "DISCORD_GATEWAY_URL" in line and "ws://" in line
