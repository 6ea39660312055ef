"""How answers are rendered: streaming and its fallback, size limits, files, assistant threads."""

from __future__ import annotations

import asyncio

from adapters.slack.mrkdwn import markdown_to_mrkdwn
from testkit.slack_harness import SlackHarness, new_ts
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore

LONG = "\n\n".join(f"Paragraph {n}: " + ("word " * 180).strip() for n in range(9))  # ~8.7k chars
HUGE = "\n\n".join(f"Section {n}: " + ("data " * 190).strip() for n in range(21))  # ~20k chars


async def test_without_streaming_api_falls_back_to_post_then_update(
    start_harness: StartHarness,
) -> None:
    core = EchoCore(draft=["Hel", "lo ", "**world**"], reply="Hello **world**", delta_pause=0.08)
    slack = await start_harness(core)
    slack.fake.streaming = False
    first = await slack.mention("a")
    await slack.wait_done(first)
    assert slack.replies("C1", thread_ts=first) == ["Hello *world*"]
    assert len(slack.fake.calls_to("chat.startStream")) == 1  # tried once, then remembered
    assert slack.fake.calls_to("chat.update")
    second = await slack.mention("b")
    await slack.wait_done(second)
    assert slack.replies("C1", thread_ts=second) == ["Hello *world*"]
    assert len(slack.fake.calls_to("chat.startStream")) == 1


async def test_updates_are_rate_bounded(start_harness: StartHarness) -> None:
    deltas = [f"w{n} " for n in range(40)]
    core = EchoCore(draft=deltas, reply="".join(deltas).strip(), delta_pause=0.02)  # ~0.8 s
    slack = await start_harness(core, update_interval=0.25)
    ts = await slack.dm("go")
    await slack.wait_done(ts)
    assert slack.replies("D1") == ["".join(deltas).strip()]
    progress = len(slack.fake.calls_to("chat.update")) + len(
        slack.fake.calls_to("chat.postMessage")
    )
    assert 2 <= progress <= 7  # 40 deltas, at most one Web API call per 0.25 s (+ final)


async def test_long_answer_is_split_under_the_message_limit(start_harness: StartHarness) -> None:
    core = EchoCore(reply=LONG)
    slack = await start_harness(core)
    ts = await slack.dm("tell me everything")
    await slack.wait_done(ts)
    parts = slack.replies("D1")
    assert len(parts) == 3 and all(len(p) <= 3900 for p in parts)
    assert "\n\n".join(parts) == markdown_to_mrkdwn(LONG)


async def test_long_answer_streams_in_one_message_within_the_stream_limit(
    start_harness: StartHarness,
) -> None:
    core = EchoCore(reply=LONG, chunks=40)
    slack = await start_harness(core)
    ts = await slack.mention("stream it")
    await slack.wait_done(ts)
    assert slack.replies("C1", thread_ts=ts) == [LONG]  # streamed Markdown, rendered by Slack
    assert slack.fake.calls_to("chat.stopStream")


async def test_huge_answer_goes_out_as_a_file(start_harness: StartHarness) -> None:
    core = EchoCore(reply=HUGE)
    slack = await start_harness(core)
    ts = await slack.dm("dump")
    await slack.wait_done(ts)
    [note] = slack.replies("D1")
    assert "attached as a file" in note and len(note) < 3900
    [content] = slack.fake.uploads.values()
    assert content.decode() == HUGE
    [complete] = slack.fake.calls_to("files.completeUploadExternal")
    assert complete.args["channel_id"] == "D1"


async def test_huge_streamed_answer_becomes_a_note_and_a_file(start_harness: StartHarness) -> None:
    core = EchoCore(reply=HUGE, chunks=30)
    slack = await start_harness(core)
    ts = await slack.mention("dump in thread")
    await slack.wait_done(ts)
    [note] = slack.replies("C1", thread_ts=ts)
    assert "attached as a file" in note
    assert next(iter(slack.fake.uploads.values())).decode() == HUGE
    assert all(
        len(str(c.args.get("chunks"))) < 13000 for c in slack.fake.calls_to("chat.appendStream")
    )


async def test_without_file_upload_a_huge_answer_is_posted_in_parts(
    start_harness: StartHarness,
) -> None:
    core = EchoCore(reply=HUGE)
    slack = await start_harness(core)
    slack.fake.fail(
        "files.getUploadURLExternal", status=200, error="missing_scope", retry_after=None
    )
    ts = await slack.dm("dump")
    await slack.wait_done(ts)
    replies = slack.replies("D1")
    assert not any("attached as a file" in r for r in replies)  # no file: never claim one
    assert all(len(r) <= 3900 for r in replies) and len(replies) >= 6
    assert "".join(replies).replace("\n", "").startswith(HUGE[:1000].replace("\n", ""))


async def test_failed_upload_of_a_streamed_answer_claims_no_file(
    start_harness: StartHarness,
) -> None:
    core = EchoCore(reply="word " * 40_000, chunks=30)
    slack = await start_harness(core)
    slack.fake.fail(
        "files.getUploadURLExternal", status=200, error="missing_scope", retry_after=None
    )
    ts = await slack.mention("dump in thread")
    await slack.wait_done(ts)
    replies = slack.replies("C1", thread_ts=ts)
    assert not any("attached as a file" in r for r in replies)
    assert len(replies) == 11 and all(len(r) <= 3900 for r in replies)
    assert replies[-1].startswith("_(answer cut: about") and "upload failed" in replies[-1]


async def test_final_text_replaces_a_different_streamed_draft(start_harness: StartHarness) -> None:
    core = EchoCore(draft=["Let me check", "..."], reply="The answer is **42**.", delta_pause=0.08)
    slack = await start_harness(core)
    ts = await slack.mention("question")
    await slack.wait_done(ts)
    assert slack.replies("C1", thread_ts=ts) == ["The answer is *42*."]


async def test_broken_stream_is_repaired_with_the_final_text(start_harness: StartHarness) -> None:
    core = EchoCore(draft=["one ", "two ", "three"], reply="one two three", delta_pause=0.08)
    slack = await start_harness(core)
    slack.fake.fail(
        "chat.appendStream", status=200, error="internal_error", retry_after=None, times=5
    )
    ts = await slack.mention("x")
    await slack.wait_done(ts)
    assert slack.replies("C1", thread_ts=ts) == ["one two three"]


async def test_markdown_is_converted_for_posted_messages(start_harness: StartHarness) -> None:
    core = EchoCore(reply="# Plan\n**Bold** and [docs](https://docs.example/x?a=1&b=2)\n- item")
    slack = await start_harness(core)
    ts = await slack.dm("format")
    await slack.wait_done(ts)
    assert slack.replies("D1") == [
        "*Plan*\n*Bold* and <https://docs.example/x?a=1&amp;b=2|docs>\n• item"
    ]


async def test_assistant_thread_prompts_status_and_title(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    thread = new_ts()
    started = {
        "type": "assistant_thread_started",
        "assistant_thread": {
            "user_id": "U1",
            "channel_id": "D5",
            "thread_ts": thread,
            "context": {},
        },
    }
    await slack.send_event(started)
    await slack.fake.wait_for(
        lambda: bool(slack.fake.calls_to("assistant.threads.setSuggestedPrompts"))
    )
    [prompts] = slack.fake.calls_to("assistant.threads.setSuggestedPrompts")
    assert prompts.args["thread_ts"] == thread and len(prompts.args["prompts"]) == 3

    await slack.dm("What is a good name for a cat?", channel="D5", thread_ts=thread)
    await slack.wait_status_cleared(thread)
    statuses = [c.args["status"] for c in slack.fake.calls_to("assistant.threads.setStatus")]
    assert statuses == ["is thinking...", ""]
    assert not slack.fake.calls_to("reactions.add")
    await slack.fake.wait_for(lambda: bool(slack.fake.calls_to("assistant.threads.setTitle")))
    [title] = slack.fake.calls_to("assistant.threads.setTitle")
    assert title.args["title"] == "What is a good name for a cat?"
    assert slack.replies("D5", thread_ts=thread) == ["echo: What is a good name for a cat?"]
    [message] = echo_core.messages
    assert message.is_dm and message.thread == thread  # each assistant thread is its own session

    await slack.dm("and a dog?", channel="D5", thread_ts=thread)
    await slack.wait_status_cleared(thread, count=2)
    assert len(slack.fake.calls_to("assistant.threads.setTitle")) == 1  # titled once


async def test_apps_without_the_assistant_surface_fall_back_to_reactions(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    slack.fake.assistant = False
    thread = new_ts()
    ts = await slack.dm("hello", channel="D6", thread_ts=thread)
    await slack.wait_done(ts)
    assert slack.fake.calls_to("reactions.add", timestamp=ts)
    assert slack.replies("D6", thread_ts=thread) == ["echo: hello"]
    ts2 = await slack.dm("again", channel="D6", thread_ts=thread)
    await slack.wait_done(ts2)
    assert len(slack.fake.calls_to("assistant.threads.setStatus")) == 1  # not retried per turn


async def test_sessions_are_team_channel_and_thread(
    slack: SlackHarness, echo_core: EchoCore
) -> None:
    a = await slack.mention("one", channel="C1")
    b = await slack.mention("two", channel="C2")
    c = await slack.dm("three", channel="D1")
    await asyncio.gather(*(slack.wait_done(ts) for ts in (a, b, c)))
    sessions = {m.text: m.session.id for m in echo_core.messages}
    assert sessions == {
        "one": f"slack:T0TEST:C1:{a}",
        "two": f"slack:T0TEST:C2:{b}",
        "three": "slack:T0TEST:D1:-",
    }


async def test_quick_short_answer_is_one_post_without_streaming(
    start_harness: StartHarness,
) -> None:
    core = EchoCore(reply="Sure, done.", chunks=4)
    slack = await start_harness(core, first_flush_seconds=0.6, first_flush_chars=160)
    ts = await slack.mention("quick")
    await slack.wait_done(ts)
    assert slack.replies("C1", thread_ts=ts) == ["Sure, done."]
    assert len(slack.fake.calls_to("chat.postMessage")) == 1
    assert not slack.fake.calls_to("chat.startStream") and not slack.fake.calls_to("chat.update")


async def test_slow_answer_starts_streaming_after_the_first_flush_delay(
    start_harness: StartHarness,
) -> None:
    words = [f"word{n} " for n in range(12)]
    core = EchoCore(draft=words, reply="".join(words), delta_pause=0.05)  # 0.6 s of deltas
    slack = await start_harness(core, first_flush_seconds=0.2, first_flush_chars=10_000)
    ts = await slack.mention("slow")
    await slack.wait_done(ts)
    [start] = slack.fake.calls_to("chat.startStream")
    first_delta_sent = slack.fake.calls_to("reactions.add")[0].at
    assert start.at - first_delta_sent >= 0.15  # held back, then streamed
    assert slack.replies("C1", thread_ts=ts) == ["".join(words)]
