"""Files shared in a Slack message, as core `Attachment`s fetched with the bot token.

Only the files of the event that triggered the turn become attachments (earlier messages of a
thread are never fetched again). The bytes come from `url_private_download` with
`Authorization: Bearer <bot token>` (the app needs the `files:read` scope): the token is only
ever sent over https to Slack's file hosts (`files.slack.com`, and GovSlack's
`files.slack-gov.com`), or to the exact origin (scheme, host and port) of `SLACK_API_URL`
(proxies, tests: the Web API client already sends the token there, so a plain-http
`SLACK_API_URL` an operator chose is the one http origin allowed). Any other URL, `http://slack.com/…`
or `http://files.slack.com/…` included, is refused before a request is made. Redirects are not
followed with the token, and the body is read in chunks up to the core's limit, never further.
Slack answers a request it will not authorise with its HTML sign-in page and a 200: that is
caught by its type and reported as a missing scope, not shown to the model as the file.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from bot.messages import Attachment, AttachmentError

_LOG = logging.getLogger(__name__)
# Slack's file hosts (GovSlack's lives under its own domain: files.slack-gov.com), https only.
SLACK_FILE_HOSTS = frozenset({"files.slack.com", "files-edu.slack.com", "files.slack-gov.com"})
CHUNK = 64 * 1024


class SlackFiles:
    """Makes attachments for one workspace's events; one HTTP client for all downloads."""

    def __init__(self, api_url: str, *, timeout: float = 30.0) -> None:
        self._api_origin = _origin(api_url)
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=10.0), follow_redirects=False
        )

    async def close(self) -> None:
        await self._http.aclose()

    def trusted(self, url: str) -> bool:
        """True when the bot token may be sent to `url` (parsed as httpx will request it)."""
        origin = _origin(url)
        if origin is None:
            return False
        scheme, host, port = origin
        if scheme == "https" and host in SLACK_FILE_HOSTS and port == 443:
            return True
        return origin == self._api_origin

    def attachments(self, event: Mapping[str, Any], token: str | None) -> tuple[Attachment, ...]:
        files = event.get("files")
        if not isinstance(files, Sequence) or isinstance(files, str | bytes):
            return ()
        return tuple(
            self._attachment(f, token) for f in files if isinstance(f, Mapping) and f.get("id")
        )

    def _attachment(self, f: Mapping[str, Any], token: str | None) -> Attachment:
        size = f.get("size")
        return Attachment(
            name=str(f.get("name") or f.get("title") or "file"),
            mime_type=str(f.get("mimetype") or ""),
            size=size if isinstance(size, int) and size >= 0 else 0,
            fetch=_SlackFetch(self, f, token),
            id=str(f["id"]),
        )

    async def download(self, url: str, token: str, max_bytes: int) -> tuple[bytes, str]:
        """The body (at most max_bytes) and its Content-Type."""
        if not self.trusted(url):  # callers check first; never send the token elsewhere
            raise AttachmentError("its download link is not on Slack's file host")
        headers = {"Authorization": f"Bearer {token}"}
        try:
            async with self._http.stream("GET", url, headers=headers) as response:
                if response.is_redirect or response.status_code in (401, 403):
                    raise AttachmentError(
                        "Slack did not let me download it (the app may lack the files:read scope)"
                    )
                if response.status_code == 404:
                    raise AttachmentError("the file is gone from Slack")
                if response.status_code != 200:
                    raise AttachmentError(f"Slack answered {response.status_code}")
                declared = response.headers.get("Content-Length")
                if declared and declared.isdigit() and int(declared) > max_bytes:
                    raise AttachmentError("it is larger than the limit per file")
                body = bytearray()
                async for chunk in response.aiter_bytes(CHUNK):
                    body += chunk
                    if len(body) > max_bytes:
                        raise AttachmentError("it is larger than the limit per file")
                return bytes(body), response.headers.get("Content-Type", "")
        except httpx.HTTPError as exc:
            _LOG.warning(
                "slack_file_download_failed", extra={"fields": {"error": type(exc).__name__}}
            )
            raise AttachmentError("the download from Slack failed") from None


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL as httpx parses it (the parser that will make the
    request), or None for anything else (other schemes, credentials in the URL, no host)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    if parsed.scheme not in ("http", "https") or not parsed.host or parsed.userinfo:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.scheme, parsed.host.lower(), port


class _SlackFetch:
    def __init__(self, files: SlackFiles, info: Mapping[str, Any], token: str | None) -> None:
        self._files = files
        self._info = info
        self._token = token

    async def __call__(self, max_bytes: int) -> bytes:
        info = self._info
        if info.get("mode") == "tombstone":
            raise AttachmentError("the file was deleted")
        if info.get("mode") == "external" or info.get("is_external"):
            raise AttachmentError("it is a link to a file stored outside Slack")
        url = str(info.get("url_private_download") or info.get("url_private") or "")
        if not url:
            raise AttachmentError("Slack gave no download link for it")
        if not self._files.trusted(url):
            raise AttachmentError("its download link is not on Slack's file host")
        if not self._token:
            raise AttachmentError("no bot token to download it with")
        data, content_type = await self._files.download(url, self._token, max_bytes)
        mime = str(info.get("mimetype") or "")
        if content_type.startswith("text/html") and not mime.startswith("text/html"):
            raise AttachmentError(
                "Slack sent its sign-in page instead (the app may lack the files:read scope)"
            )
        return data
