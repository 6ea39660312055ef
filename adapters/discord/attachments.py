"""Files shared in a Discord message, as core `Attachment`s downloaded from Discord's CDN only.

A gateway event names each file's `url` (cdn.discordapp.com) and `proxy_url`
(media.discordapp.net); whatever a message claims, bytes are fetched only

- over HTTPS from `cdn.discordapp.com` or `media.discordapp.net` (Discord's CDN and media
  proxy), or from the exact origin (scheme, host, port) of `DISCORD_API_URL`: the one setting
  that already receives the bot token (a REST proxy, or the local fake in tests), so allowing it
  lets nobody in who is not trusted with more already; with the default it is discord.com;
- following a redirect only within the same origin (at most `MAX_REDIRECTS`), never to
  another host (a redirect to a metadata address or any other site is refused, not fetched);
- streamed with a running cap: a declared `Content-Length` over the limit is refused before the
  body, and a body that runs past the limit is cut at that point whatever it declared, so a
  file can cost at most the limit (plus one chunk) however large the server makes it;
- uncompressed (`Accept-Encoding: identity`; a compressed body is refused, no bomb expands).

Every refusal is an `AttachmentError` with one line for the person (the core names the file
and why in the model's input) and one structured log line (hosts, never the URL's path).
"""

from __future__ import annotations

import logging
import ssl
from functools import cache
from urllib.parse import urljoin, urlsplit

import certifi
import discord
import httpx

from adapters.common.logs import emit
from bot.files.text import human_size
from bot.messages import Attachment, AttachmentError

_LOG = logging.getLogger(__name__)
DISCORD_FILE_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
MAX_REDIRECTS = 3
CHUNK = 64 * 1024
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0  # between bytes; the core bounds the whole download (BOT_FILE_TIMEOUT)
_DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


def _origin(url: str) -> Origin | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, a malformed IPv6 literal
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _host(url: str) -> str:
    origin = _origin(url)
    return origin[1] if origin else "?"


@cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every download (building one per client costs tens of ms)."""
    return ssl.create_default_context(cafile=certifi.where())


class DiscordFiles:
    """Which attachment URLs may be fetched, and the bounded download itself."""

    def __init__(self, api_url: str) -> None:
        self._api_origin = _origin(api_url)

    def trusted(self, url: str) -> bool:
        origin = _origin(url)
        if origin is None:
            return False
        if origin[0] == "https" and origin[2] == 443 and origin[1] in DISCORD_FILE_HOSTS:
            return True
        return origin == self._api_origin

    def attachment(self, item: discord.Attachment) -> Attachment:
        """A shared file for the core, fetched only if the turn asks for it."""
        name = str(item.filename)
        size = item.size if isinstance(item.size, int) and item.size >= 0 else 0
        urls = [u for u in (getattr(item, "url", None), getattr(item, "proxy_url", None)) if u]

        async def fetch(max_bytes: int) -> bytes:
            if size > max_bytes:
                raise AttachmentError(f"it is too large: over the {human_size(max_bytes)} limit")
            url = next((u for u in urls if self.trusted(u)), None)
            if url is None:
                emit(
                    _LOG,
                    "discord_attachment_refused",
                    logging.WARNING,
                    reason="foreign_host",
                    hosts=",".join(_host(u) for u in urls),
                    id=str(item.id),
                )
                raise AttachmentError("its link does not point to Discord's file host")
            return await self.download(url, max_bytes, attachment_id=str(item.id))

        return Attachment(
            name=name,
            mime_type=item.content_type or "application/octet-stream",
            size=size,
            fetch=fetch,
            id=str(item.id),
        )

    async def download(self, url: str, max_bytes: int, *, attachment_id: str = "") -> bytes:
        """At most `max_bytes` bytes of `url` (which must be trusted), or `AttachmentError`."""
        if not self.trusted(url):
            raise AttachmentError("its link does not point to Discord's file host")
        timeout = httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
        headers = {"Accept-Encoding": "identity"}
        try:
            async with httpx.AsyncClient(
                timeout=timeout, follow_redirects=False, verify=_tls(), trust_env=False
            ) as client:
                for _ in range(MAX_REDIRECTS + 1):
                    async with client.stream("GET", url, headers=headers) as response:
                        if response.is_redirect:
                            url = self._next_hop(url, response, attachment_id)
                            continue
                        return await _body(response, max_bytes, attachment_id)
        except httpx.HTTPError as exc:
            emit(
                _LOG,
                "discord_attachment_failed",
                logging.WARNING,
                error=type(exc).__name__,
                id=attachment_id,
            )
            raise AttachmentError("the download from Discord failed") from None
        emit(
            _LOG,
            "discord_attachment_refused",
            logging.WARNING,
            reason="redirects",
            id=attachment_id,
        )
        raise AttachmentError("Discord's file host kept redirecting it")

    @staticmethod
    def _next_hop(url: str, response: httpx.Response, attachment_id: str) -> str:
        location = str(response.headers.get("Location", ""))
        target: str = urljoin(url, location)
        if not location or _origin(target) != _origin(url):
            emit(
                _LOG,
                "discord_attachment_refused",
                logging.WARNING,
                reason="cross_host_redirect",
                host=_host(url),
                to=_host(target),
                id=attachment_id,
            )
            raise AttachmentError("the file host sent it on to another address, not followed")
        return target


async def _body(response: httpx.Response, max_bytes: int, attachment_id: str) -> bytes:
    status = response.status_code
    if status in (403, 404, 410):
        raise AttachmentError("the file is gone from Discord (or its link has expired)")
    if status != 200:
        raise AttachmentError(f"Discord's file host answered {status}")
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise AttachmentError(f"Discord's file host sent it compressed ({encoding[:20]})")
    too_large = f"it is too large: over the {human_size(max_bytes)} limit"
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise AttachmentError(too_large)
    body = bytearray()
    async for chunk in response.aiter_raw(CHUNK):
        body += chunk
        if len(body) > max_bytes:
            emit(
                _LOG,
                "discord_attachment_refused",
                logging.WARNING,
                reason="over_limit",
                declared=int(declared) if declared.isdigit() else -1,
                id=attachment_id,
            )
            raise AttachmentError(too_large + " (the download was stopped there)")
    return bytes(body)
