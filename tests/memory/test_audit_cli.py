"""`bot memory audit` as an operator runs it: a subprocess over the bot's data directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bot.core import CommandRequest
from tests.helpers import say


def audit_cli(data_dir: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """`settings`: the bot's environment for this run (REDIS_URL=..., MONGODB_URI=...)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS"))
    }
    env["BOT_DATA_DIR"] = str(data_dir)
    env.update(settings)
    return subprocess.run(
        [sys.executable, "-m", "bot", "memory", "audit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=data_dir.parent,
    )


async def test_audit_exit_codes(make_app: Any, tmp_path: Path) -> None:
    app = await make_app()
    await say(app, "please remember that my badge is orca-5150", user="UA", platform="console")
    await app.close()
    data = tmp_path / "data"
    user = "console:T1:UA"

    hit = audit_cli(data, "--user", user, "--text", "ORCA-5150")
    assert hit.returncode == 1, hit.stdout + hit.stderr
    assert "FOUND sqlite: bot.db" in hit.stdout and "Traceback" not in hit.stderr

    app = await make_app()
    reply = await app.handle_command(
        CommandRequest("console", "T1", "C1", "UA", "memory", "forget all")
    )
    assert reply.ok
    await app.close()
    clean = audit_cli(data, "--user", user, "--text", "orca-5150")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "Found nowhere" in clean.stdout

    bad = audit_cli(data, "--user", "not-a-person", "--text", "x")
    assert bad.returncode == 2 and "PLATFORM:TEAM:USER" in bad.stderr
    missing = audit_cli(data, "--user", user)
    assert missing.returncode == 2

    (data / "bot.db").chmod(0)
    try:
        if os.geteuid() != 0:  # root reads anything
            unreadable = audit_cli(data, "--user", user, "--text", "x")
            assert unreadable.returncode == 3 and "cannot read" in unreadable.stderr
    finally:
        (data / "bot.db").chmod(0o600)
    (data / "bot.db").write_bytes(b"this is not a database" * 10)
    broken = audit_cli(data, "--user", user, "--text", "x")
    assert broken.returncode == 3, broken.stdout + broken.stderr
