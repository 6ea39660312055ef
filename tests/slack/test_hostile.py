"""Hostile and careless input to POST /slack/events, over real HTTP.

Each case: the status and the one-line answer, a metric instead of a traceback, and a normal
mention sent while the bad input is flowing is still acked in under a second.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import ClientResponse

from bot import metrics
from testkit.slack_harness import SlackHarness, event_body, new_ts, signed_headers
from tests.slack.echo_core import EchoCore

ACK_LIMIT = 1.0  # seconds; Slack gives up after 3


def rejected(reason: str) -> float:
    return metrics.REJECTED_REQUESTS.labels("slack", reason)._value.get()


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing at the levels an operator runs with (INFO and up) carries a traceback."""
    with_trace = [
        r
        for r in caplog.records
        if r.levelno >= logging.INFO and (r.exc_info or "Traceback" in r.getMessage())
    ]
    assert not with_trace, [r.getMessage() for r in with_trace]


async def mention_acked_during(
    slack: SlackHarness, attack: Callable[[], Awaitable[Any]], *, rounds: int = 20
) -> float:
    """Run `attack` `rounds` times concurrently with one normal mention; its ack time."""
    ts = new_ts()
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": ts, "channel": "C9"}

    async def probe() -> float:
        await asyncio.sleep(0.01)  # let the attack start first
        started = time.perf_counter()
        resp = await slack.send_event(event)
        assert resp.status == 200
        return time.perf_counter() - started

    results = await asyncio.gather(probe(), *(attack() for _ in range(rounds)))
    await slack.wait_done(ts)  # and it was answered
    return float(results[0])


def raw(body: bytes | str) -> bytes:
    return body if isinstance(body, bytes) else body.encode()


async def post_bytes(
    slack: SlackHarness,
    body: bytes,
    *,
    content_type: str = "application/json",
    signed: bool = True,
) -> ClientResponse:
    headers = {"Content-Type": content_type}
    if signed:
        # Slack signs the raw bytes; sign them the same way (latin-1 keeps every byte).
        headers.update(signed_headers(body.decode("latin-1")))
        if not _is_utf8(body):
            headers.update(_signed_bytes(body))
    else:
        headers.update(
            {"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=00"}
        )
    resp = await slack.http.post(slack.url("/slack/events"), data=body, headers=headers)
    await resp.read()
    return resp


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _signed_bytes(body: bytes) -> dict[str, str]:
    import hashlib
    import hmac

    from testkit.slack_harness import SECRET

    stamp = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": "v0=" + digest.hexdigest()}


MALFORMED: list[tuple[str, bytes, str]] = [
    ("invalid_json", b'{"type": "event_callback", ', "application/json"),
    ("null", b"null", "application/json"),
    ("array", b"[1, 2, 3]", "application/json"),
    ("deep_nesting", b"[" * 10_000 + b"]" * 10_000, "application/json"),
    ("deep_object", b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "application/json"),
    ("invalid_utf8", b'{"type": "event_callback", "x": "\xff\xfe"}', "application/json"),
    ("utf16", '{"type": "url_verification"}'.encode("utf-16"), "application/json; charset=utf-16"),
    (
        "event_not_object",
        json.dumps(
            {"type": "event_callback", "team_id": "T0TEST", "event": "boom", "event_id": "Ev1"}
        ).encode(),
        "application/json",
    ),
    (
        "event_text_number",
        json.dumps(
            event_body(
                {"type": "app_mention", "text": 5, "user": "U1", "ts": "1.1", "channel": "C1"},
                team="T0TEST",
            )
        ).encode(),
        "application/json",
    ),
    (
        "team_id_list",
        json.dumps(
            {"type": "event_callback", "team_id": ["T"], "event": {"type": "app_mention"}}
        ).encode(),
        "application/json",
    ),
    (
        "authorizations_string",
        json.dumps(
            {"type": "event_callback", "team_id": "T0TEST", "authorizations": "x", "event": {}}
        ).encode(),
        "application/json",
    ),
    ("payload_not_json", b"payload=%7Bnot+json", "application/x-www-form-urlencoded"),
    ("payload_null", b"payload=null", "application/x-www-form-urlencoded"),
]


@pytest.mark.parametrize(("case", "body", "content_type"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_malformed_signed_body_is_400_without_a_traceback(
    slack: SlackHarness,
    echo_core: EchoCore,
    caplog: pytest.LogCaptureFixture,
    case: str,
    body: bytes,
    content_type: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    before = rejected("malformed")

    async def attack() -> None:
        resp = await post_bytes(slack, body, content_type=content_type)
        assert resp.status == 400, (case, resp.status)
        assert (await resp.text()).startswith("malformed request"), case

    ack = await mention_acked_during(slack, attack)
    assert ack < ACK_LIMIT
    assert rejected("malformed") - before == 20
    assert [m.text for m in echo_core.messages] == ["hi"]  # only the normal mention
    no_tracebacks(caplog)


@pytest.mark.parametrize(("case", "body", "content_type"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_malformed_unsigned_body_is_401(
    slack: SlackHarness,
    caplog: pytest.LogCaptureFixture,
    case: str,
    body: bytes,
    content_type: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    before = rejected("bad_signature")
    resp = await post_bytes(slack, body, content_type=content_type, signed=False)
    assert resp.status == 401 and (await resp.text()).strip() == "invalid signature"
    assert rejected("bad_signature") - before == 1
    no_tracebacks(caplog)


async def test_a_thousand_unsigned_posts_write_no_log(
    slack: SlackHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    before = rejected("bad_signature")
    start = len(caplog.records)

    async def attack() -> None:
        for _ in range(50):
            resp = await post_bytes(slack, b"[" * 2000, signed=False)
            assert resp.status == 401

    ack = await mention_acked_during(slack, attack, rounds=20)
    assert ack < ACK_LIMIT
    assert rejected("bad_signature") - before == 1000
    logged = [r for r in caplog.records[start:] if r.name.startswith(("aiohttp", "adapters"))]
    # only the probe mention's own lines (turn start, reply sent), nothing per refused request
    assert len(logged) < 20, [r.getMessage() for r in logged]
    no_tracebacks(caplog)


async def test_stale_and_wrong_signatures_are_401(slack: SlackHarness) -> None:
    body = json.dumps(event_body({"type": "app_mention", "text": "x"}, team="T0TEST"))
    stale = await slack.post_raw(body, timestamp=int(time.time()) - 600)
    assert stale.status == 401
    wrong = await slack.post_raw(body, secret="not-the-secret")
    assert wrong.status == 401
    garbage = await slack.post_raw(body, headers={"X-Slack-Request-Timestamp": "soon"})
    assert garbage.status == 401


async def test_body_over_the_cap_is_413_before_reading_it(
    slack: SlackHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    before = rejected("too_large")
    big = b'{"type": "event_callback", "pad": "' + b"x" * (3 * 1024 * 1024) + b'"}'

    async def attack() -> None:
        resp = await post_bytes(slack, big, signed=False)
        assert resp.status == 413

    ack = await mention_acked_during(slack, attack, rounds=4)
    assert ack < ACK_LIMIT
    assert rejected("too_large") - before == 4
    no_tracebacks(caplog)


async def test_chunked_body_over_the_cap_is_413(slack: SlackHarness) -> None:
    async def chunks() -> Any:
        for _ in range(40):
            yield b"x" * 65536

    resp = await slack.http.post(
        slack.url("/slack/events"),
        data=chunks(),
        headers={"Content-Type": "application/json", **signed_headers("x")},
    )
    assert resp.status == 413


async def test_slash_command_without_user_or_team_is_answered_politely(
    slack: SlackHarness, echo_core: EchoCore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for missing in ("user_id", "team_id"):
        form = {"command": "/memory", "text": "show", "team_id": "T0TEST", "user_id": "U1"}
        del form[missing]
        from urllib.parse import urlencode

        resp = await slack.post_raw(
            urlencode(form), content_type="application/x-www-form-urlencoded"
        )
        assert resp.status == 200
        answer = await resp.json()
        assert answer["response_type"] == "ephemeral"
        assert answer["text"].startswith("Sorry, I could not read that command")
    assert echo_core.commands == []
    no_tracebacks(caplog)


@pytest.mark.parametrize(
    "reply",
    ["*_~``" * 2_200, "[" * 11_000, "**a " * 2_700, "*_~``" * 200_000],
    ids=["star_underscore_tilde_backtick_11k", "brackets_11k", "unclosed_bold_11k", "1MB"],
)
async def test_hostile_model_output_never_stalls_the_loop(
    start_harness: Any, reply: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A reply that used to make the mrkdwn conversion backtrack for seconds to minutes."""
    caplog.set_level(logging.INFO)
    slack = await start_harness(EchoCore(reply=reply, chunks=40))
    dm = await slack.dm("say something odd", channel="D7")

    async def nothing() -> None:
        return None

    ack = await mention_acked_during(slack, nothing, rounds=1)
    assert ack < ACK_LIMIT
    await slack.wait_done(dm, timeout=20)
    replies = slack.replies("D7")
    assert replies and all(len(r) <= 3900 for r in replies)
    no_tracebacks(caplog)
