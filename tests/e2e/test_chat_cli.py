"""`bot chat` as a user runs it: a subprocess reading stdin lines, on FakeOpenAI over HTTP."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fakes.openai_server import FakeOpenAI, status, text

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start_in_thread()
    yield server
    server.stop()


def _run_chat(
    lines: list[str],
    *,
    fake: FakeOpenAI | None,
    data_dir: Path,
    args: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS"))
    }
    env.update(
        {"BOT_DATA_DIR": str(data_dir), "OPENAI_API_KEY": "sk-test", "BOT_MODEL_RETRIES": "2"}
    )
    if fake is not None:
        env["OPENAI_BASE_URL"] = fake.base_url
    env.update(env_extra or {})
    for name in drop:
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "bot", "chat", *args],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        cwd=data_dir.parent,
        env=env,
    )


run_chat = _run_chat


def test_a_reply_arrives(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(text("Hello from the model!"))
    out = run_chat(["hello"], fake=fake, data_dir=tmp_path / "d")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Hello from the model!"
    assert fake.requests[0]["messages"][-1] == {"role": "user", "content": "hello"}


def test_two_429s_then_success(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.push(status(429, retry_after=1), status(429, retry_after_ms=100), text("finally"))
    out = run_chat(["hi"], fake=fake, data_dir=tmp_path / "d")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "finally"
    assert len(fake.requests) == 3


def test_persistent_500s_give_a_friendly_message_and_clean_exit(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.push(*[status(500, retry_after_ms=10) for _ in range(3)])
    out = run_chat(["hi"], fake=fake, data_dir=tmp_path / "d")
    assert out.returncode == 0
    reply = out.stdout.strip()
    assert reply and "Traceback" not in out.stdout + out.stderr
    assert "500" not in reply and "sk-test" not in out.stdout + out.stderr


def test_missing_api_key_is_one_clear_line(tmp_path: Path) -> None:
    out = run_chat(["hi"], fake=None, data_dir=tmp_path / "d", drop=("OPENAI_API_KEY",))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "OPENAI_API_KEY" in lines[0]
    assert "Traceback" not in out.stderr


def test_malformed_setting_is_one_clear_line(tmp_path: Path) -> None:
    out = run_chat(
        ["hi"], fake=None, data_dir=tmp_path / "d", env_extra={"BOT_CONTEXT_TOKENS": "lots"}
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "BOT_CONTEXT_TOKENS" in lines[0]


@pytest.fixture(params=["embedded", "mongo+redis"])
def backends(request: pytest.FixtureRequest) -> dict[str, str]:
    """Environment for the store/cache combination: none set, or MongoDB (mongoeco) + Redis."""
    if request.param == "embedded":
        return {}
    mongo_uri: str = request.getfixturevalue("mongo_uri")
    redis_url: str = request.getfixturevalue("redis_url")
    return {
        "MONGODB_URI": mongo_uri,
        "MONGODB_DB": f"chat{uuid.uuid4().hex[:10]}",
        "REDIS_URL": redis_url,
    }


@pytest.mark.parametrize(
    ("ask", "fact"),
    [
        ("Please remember that I am allergic to peanuts.", "I am allergic to peanuts"),
        ("请记住我对花生过敏", "我对花生过敏"),
    ],
)
def test_remembered_fact_follows_the_person_not_others(
    fake: FakeOpenAI, tmp_path: Path, ask: str, fact: str, backends: dict[str, str]
) -> None:
    data = tmp_path / "d"
    run_chat = functools.partial(_run_chat, env_extra=backends)
    # Unique places: with REDIS_URL the hot caches and locks live in a Redis shared with others.
    sfx = uuid.uuid4().hex[:8]
    general, random = f"general-{sfx}", f"random-{sfx}"
    first = run_chat(
        [ask], fake=fake, data_dir=data, args=("--user", "alice", "--channel", general)
    )
    assert first.returncode == 0, first.stderr
    assert any(
        c["function"]["name"] == "remember"
        for r in fake.requests
        for m in r["messages"]
        for c in m.get("tool_calls") or []
    )
    fake.requests.clear()
    # A new process, the same person, another channel: the fact is in the model's context.
    again = run_chat(
        ["what should I eat?"],
        fake=fake,
        data_dir=data,
        args=("--user", "alice", "--channel", random),
    )
    assert again.returncode == 0, again.stderr
    assert fact in json.dumps(fake.requests[-1]["messages"], ensure_ascii=False)
    # Another person, in either channel: it is not.
    fake.requests.clear()
    for channel in (general, random, f"dm-bob-{sfx}"):
        other = run_chat(
            ["what should I eat?"],
            fake=fake,
            data_dir=data,
            args=("--user", "bob", "--channel", channel),
        )
        assert other.returncode == 0, other.stderr
    seen = json.dumps(fake.requests, ensure_ascii=False)
    assert fact not in seen
    # Even in #general, where Alice asked: a turn in which someone asked the bot to remember
    # something personal is shown in context to that person only. /memory show: Alice only.
    shown = run_chat(["/memory show"], fake=fake, data_dir=data, args=("--user", "alice"))
    assert fact in shown.stdout
    nothing = run_chat(["/memory show"], fake=fake, data_dir=data, args=("--user", "bob"))
    assert fact not in nothing.stdout and "don't remember anything" in nothing.stdout


def test_forget_all_erases_facts_and_turns(fake: FakeOpenAI, tmp_path: Path) -> None:
    data = tmp_path / "d"
    run_chat(
        ["Please remember that I like green tea.", "my secret code is 4242"],
        fake=fake,
        data_dir=data,
        args=("--user", "carol"),
    )
    out = run_chat(
        ["/memory forget all", "/memory show"], fake=fake, data_dir=data, args=("--user", "carol")
    )
    assert "1 fact(s)" in out.stdout and "don't remember anything" in out.stdout
    raw = b"".join(p.read_bytes() for p in data.iterdir() if p.is_file())
    assert b"green tea" not in raw and b"4242" not in raw


def _doctor(env_extra: dict[str, str], data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "BOT_", "MONGODB", "REDIS"))
    }
    env.update({"BOT_DATA_DIR": str(data_dir), "OPENAI_API_KEY": "sk-test", **env_extra})
    return subprocess.run(
        [sys.executable, "-m", "bot", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=data_dir.parent,
        env=env,
    )


def test_doctor_reports_each_check(fake: FakeOpenAI, tmp_path: Path) -> None:
    good = _doctor({"OPENAI_BASE_URL": fake.base_url}, tmp_path / "d")
    assert good.returncode == 0, good.stdout + good.stderr
    names = [line.split()[1].rstrip(":") for line in good.stdout.splitlines()]
    assert {"config", "tokens", "model", "store", "cache", "inbox"} <= set(names)
    assert "FAIL" not in good.stdout
    assert "inbox: SQLite table: 0 waiting" in good.stdout

    bad = _doctor(
        {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "REDIS_URL": "redis://127.0.0.1:9/0"},
        tmp_path / "d",
    )
    assert bad.returncode == 1
    fails = [line for line in bad.stdout.splitlines() if line.startswith("FAIL")]
    # The inbox is in Redis when REDIS_URL is set: unreachable with it.
    assert {line.split()[1].rstrip(":") for line in fails} == {"model", "cache", "inbox"}
    assert "Traceback" not in bad.stdout + bad.stderr
