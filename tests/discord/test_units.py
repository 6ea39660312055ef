"""Pure parts of the Discord adapter: splitting, mention clean-up, thread titles, nonces."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapters.common.split import close_fence, open_fence, split_message
from adapters.discord.normalize import mentions_bot, readable_text, thread_name
from adapters.discord.sink import part_nonce

FENCE_LINE = re.compile(r"^```\w*$", re.MULTILINE)

blocks = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=900),
    st.builds(
        lambda lang, body: f"```{lang}\n{body}\n```",
        st.sampled_from(["", "python", "js"]),
        st.text(alphabet="abc def\n{}();=", min_size=1, max_size=2500),
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(blocks, min_size=1, max_size=6), st.sampled_from([200, 2000]))
@example(["\r"], 200)  # found by Hypothesis: whitespace only
def test_parts_fit_close_their_fences_and_keep_every_word(pieces: list[str], limit: int) -> None:
    text = "\n\n".join(pieces)
    parts = split_message(text, limit)
    if not text.strip():  # only whitespace (e.g. "\r"): the placeholder, never an empty message
        assert parts == ["…"]
        return
    assert all(0 < len(p) <= limit for p in parts)
    assert all(p.strip() for p in parts)
    assert all(open_fence(p) is None for p in parts)
    undo = " ".join(FENCE_LINE.sub("", p) for p in parts).split()
    assert undo == FENCE_LINE.sub("", text.strip("\n")).split()


def test_a_reopened_fence_keeps_its_language() -> None:
    text = "```rust\n" + "\n".join(f"let x{i} = {i};" for i in range(400)) + "\n```"
    parts = split_message(text, 2000)
    assert len(parts) > 1
    assert all(p.startswith("```rust\n") and p.endswith("\n```") for p in parts)


def test_a_short_text_is_one_part_and_empty_is_never_sent() -> None:
    assert split_message("hello") == ["hello"]
    assert split_message("\n\n") == ["…"]
    assert close_fence("```py\nx = 1") == "```py\nx = 1\n```"
    assert close_fence("done") == "done"


def test_mentions_become_readable_and_the_bots_own_is_removed() -> None:
    text = readable_text(
        "<@5> hi <@!7>, ask <@&9> in <#3> about <@8>\n    indented code",
        bot_id=5,
        users={7: "Ada"},
        roles={9: "Mods"},
        channels={3: "general"},
    )
    assert text == "hi @Ada, ask @Mods in #general about @unknown-user\n    indented code"
    assert readable_text("<@&42> help", bot_id=5, bot_role_id=42) == "help"
    assert mentions_bot("hey <@!5>", bot_id=5)
    assert mentions_bot("hey <@&42>", bot_id=5, bot_role_id=42)
    assert not mentions_bot("hey <@6> <#5>", bot_id=5)


def test_thread_names_are_short_first_lines() -> None:
    assert thread_name("How do I\nsecond line") == "How do I"
    long = thread_name("word " * 40, limit=30)
    assert len(long) <= 30 and long.endswith("…")
    assert thread_name("   ") == "Conversation"


def test_nonces_are_stable_distinct_and_fit_discords_limit() -> None:
    a, b = part_nonce("123", 0), part_nonce("123", 1)
    assert a == part_nonce("123", 0) and a != b and len(a) <= 25


def test_the_one_splitter_keeps_slack_tokens_whole_when_asked() -> None:
    """Slack's mrkdwn links and mentions are `<...>` tokens: a cut never falls inside one."""
    link = "<https://example.com/a|the docs here and there and everywhere>"
    text = "x" * 30 + " " + link + " and more words after it" * 5
    plain = split_message(text, 70)
    assert any("<https" in p and "|the docs>" not in p for p in plain)  # cut inside the token
    kept = split_message(text, 70, angle_tokens=True)
    assert all(p.count("<") == p.count(">") for p in kept), kept
    assert "".join(kept).replace(" ", "") == text.strip().replace(" ", "")
