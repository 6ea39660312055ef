"""Child process of `test_image_memory`: a real BotApp on FakeOpenAI, six people sending the
PNG at argv[1] at once. Prints one JSON line: its peak RSS before and after (the kernel's
high-water mark, so Pillow's C allocations count), each person's reply and what the model saw.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.app import build_app
from bot.config import Settings
from bot.files.images import DECODE_BUDGET
from testkit.fakes.openai_server import FakeOpenAI
from testkit.files import attachment
from tests.helpers import CollectingSink, message

PEOPLE = 6


def _peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _decoding() -> bool:
    return DECODE_BUDGET.used > 0


async def _until(condition: Callable[[], object]) -> None:
    """Poll a state another task changes (the decode budget has no event of its own)."""
    for _ in range(6000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("the image turns never started decoding")


def _seen(request: dict[str, Any]) -> dict[str, Any]:
    content = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
    if isinstance(content, str):
        return {"text": content, "images": 0}
    text = " ".join(p["text"] for p in content if p["type"] == "text")
    return {"text": text, "images": sum(1 for p in content if p["type"] == "image_url")}


async def main(png: bytes, data_dir: str) -> dict[str, Any]:
    async with FakeOpenAI() as fake:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            openai_api_key="sk-test",
            openai_base_url=fake.base_url,
            bot_model="gpt-4o-mini",
            bot_data_dir=Path(data_dir),
            bot_model_retries=1,
            bot_rate_user="off",
            bot_rate_team="off",
        )
        app = await build_app(settings)
        try:
            await app.handle_message(message("warm up"), CollectingSink())
            base = _peak_kb()
            sinks = [CollectingSink() for _ in range(PEOPLE)]
            attack = asyncio.gather(
                *(
                    app.handle_message(
                        replace(
                            message("what is in this picture?", user=f"U{i}", channel=f"C{i}"),
                            attachments=(attachment(f"shot-{i}.png", png, "image/png"),),
                        ),
                        sink,
                    )
                    for i, sink in enumerate(sinks)
                )
            )
            # Someone else asks a plain question while the six images are being opened.
            await _until(lambda: fake.requests[1:] or any(s.final for s in sinks) or _decoding())
            normal = CollectingSink()
            started = time.monotonic()
            await app.handle_message(message("hello?", user="U9", channel="C9"), normal)
            normal_seconds = time.monotonic() - started
            images_left = sum(1 for s in sinks if s.final is None)
            await attack
            peak = _peak_kb()
            return {
                "base_kb": base,
                "peak_kb": peak,
                "replies": [{"final": s.final, "error": s.error} for s in sinks],
                "seen": [_seen(r) for r in fake.requests[1:] if "hello?" not in json.dumps(r)],
                "normal": {"final": normal.final, "seconds": normal_seconds},
                "images_left_when_answered": images_left,
            }
        finally:
            await app.close()


if __name__ == "__main__":
    data = Path(sys.argv[1]).read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(asyncio.run(main(data, tmp))))
