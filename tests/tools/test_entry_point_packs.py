"""Packs from other installed distributions (`chatbot.tool_packs` entry points).

`tests/packs/echo_pack` is a separate distribution that `.ci/run` installs into the test venv,
exactly as a team would `pip install` its own pack next to the bot. A broken pack is simulated
with a distribution's metadata on PYTHONPATH in a subprocess, so it never leaks into other tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bot.core import CommandRequest
from testkit.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.helpers import say
from tests.support.ci import missing
from tools.packs import PACKS

ROOT = Path(__file__).resolve().parents[2]


def _need_echo() -> None:
    if "echo" not in PACKS:
        missing(
            "tests/packs/echo_pack is not installed (bash .ci/run installs it; pip install -e "
            "tests/packs/echo_pack to run this test)"
        )


def cmd(text: str, *, admin: bool = True, team: str = "T1") -> CommandRequest:
    return CommandRequest("test", team, "C1", "U1", "tools", text, is_platform_admin=admin)


async def test_installed_distribution_pack_is_listed_installed_and_called(
    make_app: Any, fake_openai: FakeOpenAI
) -> None:
    _need_echo()
    app = await make_app()
    listed = await app.handle_command(cmd("list"))
    assert "`echo`" in listed.text
    done = await app.handle_command(cmd("install echo prefix=>>"))
    assert done.ok, done.text
    fake_openai.push(tool_calls([("echo_text", {"text": "hi there"})]), text("It said >>hi there."))
    sink = await say(app, "echo hi there")
    assert sink.final == "It said >>hi there."
    offered = {t["function"]["name"] for t in fake_openai.requests[0]["tools"]}
    assert "echo_text" in offered
    tool_msg = next(m for m in fake_openai.requests[1]["messages"] if m["role"] == "tool")
    assert '"echo":">>hi there"' in tool_msg["content"]
    # Another team did not install it: not offered there.
    fake_openai.push(text("ok"))
    await say(app, "echo hi", team="T2")
    assert "echo_text" not in {t["function"]["name"] for t in fake_openai.requests[-1]["tools"]}


def _broken_dist(where: Path) -> None:
    info = where / "broken_team_pack-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-team-pack\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[chatbot.tool_packs]\n"
        "broken = broken_team_pack_missing_module:PACK\n"
        "notapack = json:dumps\n"
    )


def _run(args: list[str], tmp: Path, extra: dict[str, str], stdin: str = "") -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "BOT_", "REDIS"))}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(tmp / "site"), str(ROOT)]),
            "BOT_DATA_DIR": str(tmp / "data"),
            "OPENAI_API_KEY": "sk-test",
            **extra,
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp,
        env=env,
    )


def test_a_broken_pack_is_reported_and_does_not_stop_the_bot(tmp_path: Path) -> None:
    _broken_dist(tmp_path / "site")
    with FakeOpenAI() as fake:
        fake.push(text("still here"))
        chat = _run(["chat"], tmp_path, {"OPENAI_BASE_URL": fake.base_url}, stdin="hello\n/tools\n")
        assert chat.returncode == 0, chat.stderr
        assert "still here" in chat.stdout
        assert "`weather`" in chat.stdout  # the good packs are all there
        assert "tool_pack_load_failed" in chat.stderr
        assert "Traceback" not in chat.stdout + chat.stderr
        doctor = _run(["doctor"], tmp_path, {"OPENAI_BASE_URL": fake.base_url})
    lines = doctor.stdout.splitlines()
    fails = [line for line in lines if line.startswith("FAIL")]
    assert any("tool pack broken" in f and "ModuleNotFoundError" in f for f in fails), lines
    assert any("tool pack notapack" in f and "not a ToolPack" in f for f in fails), lines
    assert doctor.returncode == 1
    assert any(line.startswith("ok   store") for line in lines)  # the other checks still ran
