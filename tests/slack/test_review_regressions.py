"""Regressions found in review: mrkdwn fences and URLs with parentheses, cancelled turns."""

from __future__ import annotations

from adapters.slack.mrkdwn import markdown_to_mrkdwn
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore


# 1. single-line fenced code: content dropped, rest of answer becomes a code block
async def test_single_line_fence_is_kept(start_harness: StartHarness) -> None:
    core = EchoCore(reply="Run ```npm install``` first.\n```npm install```\nThen **build**.")
    slack = await start_harness(core)
    ts = await slack.dm("how?")
    await slack.wait_done(ts)
    [text] = slack.replies("D1")
    assert text.count("npm install") == 2, text  # content must survive
    assert "*build*" in text and text.count("```") % 2 == 0, text


# 2. URLs with parentheses: link target cut, stray ')' left behind
def test_markdown_link_with_parens() -> None:
    url = "https://en.wikipedia.org/wiki/Python_(programming_language)"
    assert markdown_to_mrkdwn(f"See [Python]({url}).") == f"See <{url}|Python>."


def test_bare_url_with_parens() -> None:
    url = "https://en.wikipedia.org/wiki/Python_(programming_language)"
    assert markdown_to_mrkdwn(f"See {url} now") == f"See <{url}> now"


# 3. a ~~~ line inside a ``` block closes it
def test_tilde_line_inside_backtick_fence() -> None:
    out = markdown_to_mrkdwn("```\nmarkdown uses\n~~~\nas a fence too\n```\n**after**")
    assert out.endswith("*after*"), out


# 4. a turn cancelled at shutdown keeps the :eyes: reaction and gets no reply at all
async def test_cancelled_turn_clears_reaction(start_harness: StartHarness) -> None:
    core = EchoCore(delay=5.0)
    slack = await start_harness(core, shutdown_grace_seconds=0.2)
    ts = await slack.mention("slow one")
    await slack.fake.wait_for(lambda: bool(slack.fake.calls_to("reactions.add", timestamp=ts)))
    await slack.runner.cleanup()  # runtime.stop(): drain(0.2 s) then cancel
    assert sorted(await slack.wait_handled()) == ["cancelled", "ignored"]
    assert slack.fake.calls_to("reactions.remove", timestamp=ts), "reaction left on the message"
    [reply] = slack.replies("C1", thread_ts=ts)
    assert reply.startswith("Sorry, I was restarting")
