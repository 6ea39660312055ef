"""Long replies, streaming edits and shared files, through the real client (echo core)."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from adapters.common.split import open_fence
from testkit.fakes.discord_api import FakeDiscord
from tests.discord.conftest import StartDiscord
from tests.slack.echo_core import EchoCore

FENCE_LINE = re.compile(r"^```(\w*)$", re.MULTILINE)


def long_answer() -> str:
    code = "\n".join(
        f"    total += item_{i}  # add item {i} to the running total" for i in range(90)
    )
    prose = " ".join(f"Sentence number {i} explains one more step." for i in range(60))
    return f"Here is the plan.\n\n{prose}\n\n```python\ndef total():\n{code}\n```\n\nDone."


async def test_a_long_reply_is_split_without_breaking_the_code_block(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    answer = long_answer()
    core = EchoCore(reply=answer, chunks=1)
    h = await start_discord(core)
    await fake_discord.user_says(dm, ada, "show me the code")
    await fake_discord.wait_for(lambda: len(fake_discord.bot_messages(dm)) >= 3)
    await h.idle()
    parts = [m["content"] for m in fake_discord.bot_messages(dm)]
    assert len(parts) >= 3
    assert all(0 < len(p) <= 2000 for p in parts)  # the fake also rejects longer ones
    assert all(open_fence(p) is None for p in parts)  # no part leaves a fence open
    opened_later = [p for p in parts[1:] if p.startswith("```python\n")]
    assert opened_later, "a part that continues the block reopens it with its language"
    # Nothing lost: the words of the answer come back in order once fences are undone.
    joined = " ".join(FENCE_LINE.sub("", p) for p in parts).split()
    assert joined == FENCE_LINE.sub("", answer).split()


async def test_streamed_reply_edits_at_most_once_a_second_then_final_text(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    words = [f"word{i} " for i in range(30)]
    answer = "".join(words).strip()
    core = EchoCore(reply=answer, draft=words, delta_pause=0.1)  # ~3 s of streaming
    h = await start_discord(core, first_edit_chars=20)
    await fake_discord.user_says(dm, ada, "stream please")
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)))
    await h.idle()
    [message] = fake_discord.bot_messages(dm)
    assert message["content"] == answer
    edits = fake_discord.calls_to("PATCH", rf"/channels/{dm}/messages/{message['id']}$")
    assert len(edits) >= 2, "the answer was shown while it streamed"
    streamed = edits[:-1]  # the last edit is the final text, sent as soon as it is known
    gaps = [b.at - a.at for a, b in itertools.pairwise(streamed)]
    assert all(gap >= 0.99 for gap in gaps), gaps
    assert all(c.body["content"].endswith(" …") for c in streamed)


async def test_shared_files_reach_the_core_and_are_fetched_only_on_demand(
    fake_discord: FakeDiscord, start_discord: StartDiscord
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    core = EchoCore()
    h = await start_discord(core)
    note = fake_discord.attachment("notes.txt", b"remember the milk", "text/plain")
    big = fake_discord.attachment("huge.bin", b"x" * 5000, "application/octet-stream")
    await fake_discord.user_says(dm, ada, "what is in these?", attachments=[note, big])
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)))
    await h.idle()
    [message] = core.messages
    assert [(a.name, a.mime_type, a.size) for a in message.attachments] == [
        ("notes.txt", "text/plain", 17),
        ("huge.bin", "application/octet-stream", 5000),
    ]
    assert fake_discord.cdn_requests == 0  # nothing downloaded until the core asks
    assert await message.attachments[0].fetch(1000) == b"remember the milk"
    try:
        await message.attachments[1].fetch(1000)
    except Exception as exc:
        assert type(exc).__name__ == "AttachmentError" and "too large" in str(exc)
    else:
        raise AssertionError("a file over the limit must not be returned")
    assert fake_discord.cdn_requests == 1  # the big one was refused by its size, unread


async def test_a_shared_text_file_reaches_the_model_through_the_real_core(
    fake_discord: FakeDiscord, start_discord: StartDiscord, make_app: Any, fake_openai: Any
) -> None:
    ada = fake_discord.add_user("Ada")
    dm = fake_discord.dm_channel(ada)
    h = await start_discord(await make_app())
    note = fake_discord.attachment("notes.txt", b"the secret word is pineapple\n", "text/plain")
    await fake_discord.user_says(dm, ada, "what does my note say?", attachments=[note])
    await fake_discord.wait_for(lambda: bool(fake_discord.bot_messages(dm)))
    await h.idle()
    assert fake_discord.cdn_requests == 1
    sent = json.dumps(fake_openai.requests[-1]["messages"])
    assert "pineapple" in sent and "notes.txt" in sent
