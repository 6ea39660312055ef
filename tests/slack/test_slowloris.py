"""Stalled and trickling connections are closed; bodies that trickle get 408; acks keep flowing."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from testkit.slack_harness import SlackHarness, new_ts, signed_headers
from tests.slack.conftest import StartHarness
from tests.slack.echo_core import EchoCore
from tests.slack.test_hostile import ACK_LIMIT, no_tracebacks, rejected

IDLE = 0.3


async def open_stalled(
    port: int, first: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if first:
        writer.write(first)
        await writer.drain()
    return reader, writer


async def closed_by_server(reader: asyncio.StreamReader, timeout: float = 5.0) -> bool:
    """True when the server ends the connection (read() reaches EOF) within `timeout`."""
    try:
        await asyncio.wait_for(reader.read(), timeout)
    except (ConnectionError, OSError):
        return True
    except TimeoutError:
        return False
    return True


async def probe_ack(slack: SlackHarness) -> float:
    ts = new_ts()
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": ts, "channel": "C9"}
    started = time.perf_counter()
    resp = await slack.send_event(event)
    assert resp.status == 200
    took = time.perf_counter() - started
    await slack.wait_done(ts)
    return took


async def test_stalled_sockets_are_closed_and_acks_keep_flowing(
    start_harness: StartHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    slack = await start_harness(EchoCore(), idle_timeout=IDLE)
    before = rejected("idle_connection")
    partial = b"POST /slack/events HTTP/1.1\r\nHost: x\r\nX-Slack-Sig"
    conns = await asyncio.gather(
        *(open_stalled(slack.port, partial if i % 2 else b"") for i in range(200))
    )

    async def trickle(writer: asyncio.StreamWriter) -> None:
        # a byte every 0.1 s never completes the head; the guard does not extend the deadline
        for _ in range(30):
            await asyncio.sleep(0.1)
            if writer.is_closing():
                return
            try:
                writer.write(b"a")
                await writer.drain()
            except (ConnectionError, OSError):
                return

    trickles = [asyncio.ensure_future(trickle(w)) for _, w in conns[1::2]]
    ack = await probe_ack(slack)
    assert ack < ACK_LIMIT
    closed = await asyncio.gather(*(closed_by_server(r) for r, _ in conns))
    assert all(closed)
    assert rejected("idle_connection") - before >= 200
    for task in trickles:
        task.cancel()
    for _, writer in conns:
        writer.close()
    no_tracebacks(caplog)


async def test_idle_keep_alive_connection_is_closed_after_its_response(
    start_harness: StartHarness,
) -> None:
    slack = await start_harness(EchoCore(), idle_timeout=IDLE)
    reader, writer = await asyncio.open_connection("127.0.0.1", slack.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200")
    assert await closed_by_server(reader)  # no second request: closed after IDLE
    writer.close()


async def test_slow_body_gets_408_and_an_aborted_body_no_traceback(
    start_harness: StartHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    slack = await start_harness(EchoCore(), body_timeout=IDLE)
    before_slow, before_aborted = rejected("slow_body"), rejected("aborted")
    body = b'{"type": "event_callback"}'
    headers = signed_headers(body.decode())
    head = (
        "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        + "\r\n"
    ).encode()

    slow_reader, slow = await open_stalled(slack.port, head + body[:5])
    _aborted_reader, aborted = await open_stalled(slack.port, head + body[:5])
    aborted.close()  # the client goes away mid-body
    ack = await probe_ack(slack)
    assert ack < ACK_LIMIT
    answer = await asyncio.wait_for(slow_reader.read(), 5)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:40]
    assert b"request body not received in time" in answer
    await slack.fake.wait_for(lambda: rejected("aborted") > before_aborted)
    assert rejected("slow_body") - before_slow == 1
    slow.close()
    no_tracebacks(caplog)
