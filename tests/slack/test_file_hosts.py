"""Where the bot token may go when a shared file is downloaded: https to Slack's file hosts
(GovSlack's is `files.slack-gov.com`), or the exact origin of SLACK_API_URL; never plain http to
Slack (`http://slack.com/…`, `http://files.slack.com/…`), refused before any request.

The plain-http case is checked at a real server: an HTTP proxy (the standard `HTTP_PROXY`
variable, which the download client honours) that records every request it is sent. A control
request proves the route to it works, so "it received nothing" means the bot refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from adapters.slack.files import SlackFiles
from bot.messages import AttachmentError

TOKEN = "xoxb-plain-http-secret"


class RecordingProxy:
    """A plain-http server that answers everything 200 and records (url, Authorization)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        self.server = TestServer(app, host="127.0.0.1")

    async def _any(self, request: web.Request) -> web.Response:
        self.seen.append((str(request.url), request.headers.get("Authorization")))
        return web.Response(text="file body over plain http", content_type="text/plain")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"


@pytest.fixture
async def proxy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RecordingProxy]:
    recorder = RecordingProxy()
    await recorder.server.start_server()
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, recorder.url)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    yield recorder
    await recorder.server.close()


def _file(url: str) -> dict[str, Any]:
    return {"id": "F1", "name": "a.txt", "mimetype": "text/plain", "url_private_download": url}


PLAIN_HTTP = [
    "http://slack.com/files-pri/T1-F1/download/a.txt",
    "http://files.slack.com/files-pri/T1-F1/download/a.txt",
    "http://files.slack-gov.com/files-pri/T1-F1/download/a.txt",
    "http://slack.com:443/files-pri/T1-F1/download/a.txt",
]


@pytest.mark.parametrize("api_url", ["https://slack.com/api/", "https://slack-gov.com/api/"])
async def test_the_token_never_goes_over_plain_http(proxy: RecordingProxy, api_url: str) -> None:
    async with httpx.AsyncClient() as control:  # the route to the proxy is live
        answer = await control.get("http://files.slack.com/control")
    assert answer.status_code == 200 and proxy.seen == [("http://files.slack.com/control", None)]
    proxy.seen.clear()

    files = SlackFiles(api_url)  # built after HTTP_PROXY is set: its client would use it
    try:
        for url in PLAIN_HTTP:
            [attachment] = files.attachments({"files": [_file(url)]}, TOKEN)
            with pytest.raises(AttachmentError, match="not on Slack's file host"):
                await attachment.fetch(10_000)
            with pytest.raises(AttachmentError):  # the download itself refuses too
                await files.download(url, TOKEN, 10_000)
    finally:
        await files.close()
    assert proxy.seen == []


def test_govslack_files_are_on_files_slack_gov_com() -> None:
    files = SlackFiles("https://slack-gov.com/api/")
    assert files.trusted("https://files.slack-gov.com/files-pri/T1-F1/download/a.png")
    assert not files.trusted("https://files-gov.slack.com/files-pri/T1-F1/download/a.png")
    assert not files.trusted("http://files.slack-gov.com/files-pri/T1-F1/download/a.png")
    assert files.trusted("https://files.slack.com/files-pri/T1-F1/download/a.png")


@pytest.mark.parametrize(
    ("url", "trusted"),
    [
        ("https://files.slack.com/files-pri/T1-F1/download/a.png", True),
        ("https://FILES.SLACK.COM/files-pri/T1-F1/download/a.png", True),
        ("https://files.slack.com:443/files-pri/T1-F1/download/a.png", True),
        ("https://files.slack.com:8443/files-pri/T1-F1/download/a.png", False),
        ("http://files.slack.com/files-pri/T1-F1/a.png", False),
        ("http://slack.com/files-pri/T1-F1/a.png", False),
        ("https://slack.com/files-pri/T1-F1/a.png", True),  # SLACK_API_URL's own origin
        ("https://files.slack.com.evil.example/a.png", False),
        ("https://evil.example@files.slack.com/a.png", False),  # credentials in the URL
        ("https://files.slack.com@evil.example/a.png", False),
        ("ftp://files.slack.com/a.png", False),
        ("//files.slack.com/a.png", False),
        ("https://[::1/a.png", False),
        ("", False),
    ],
)
def test_which_urls_may_carry_the_token(url: str, trusted: bool) -> None:
    assert SlackFiles("https://slack.com/api/").trusted(url) is trusted


def test_a_plain_http_slack_api_url_allows_only_its_own_origin() -> None:
    """Tests and proxies: an operator's http SLACK_API_URL already carries the token for every
    Web API call; downloads may go to that exact origin, nowhere else over http."""
    files = SlackFiles("http://127.0.0.1:4567/api/")
    assert files.trusted("http://127.0.0.1:4567/files-pri/T1-F1/download/a.png")
    assert not files.trusted("https://127.0.0.1:4567/files-pri/T1-F1/download/a.png")
    assert not files.trusted("http://127.0.0.1:9999/a.png")
    assert not files.trusted("http://files.slack.com/files-pri/T1-F1/a.png")
