"""Reading POST /slack/events before Bolt sees it: bounded, signature first, shape checked.

Anyone on the internet can post to this URL, so nothing is parsed before the request is known to
come from Slack, and nothing an outsider sends may cost a traceback, a big log line or much CPU:

- the body is read with a size cap (413 over `max_bytes`, from Content-Length or while reading)
  and a time limit (408 for a body that trickles in);
- the signature (`v0=HMAC-SHA256(secret, "v0:{ts}:{raw bytes}")`, timestamp within 5 minutes) is
  checked on the raw bytes, before any decoding (401);
- only then is the body decoded (UTF-8 only) and parsed the way Bolt parses it (JSON when it
  starts with `{`, else a form, with interactivity's `payload` JSON), and the fields Bolt and the
  listeners read are checked for their types (400).

Every refusal is one metric increment (`bot_rejected_requests_total{reason}`) and at most a
debug line; the answer body is one short line.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from bot import metrics

SIGNATURE_WINDOW = 300  # seconds, as Slack's own verifier
MAX_FORM_FIELDS = 64

_EVENT_STRINGS = (
    "type",
    "subtype",
    "user",
    "text",
    "channel",
    "channel_type",
    "ts",
    "thread_ts",
    "event_ts",
    "bot_id",
    "parent_user_id",
    "team",
    "user_team",
)
_TOP_STRINGS = (
    "type",
    "token",
    "team_id",
    "enterprise_id",
    "api_app_id",
    "event_id",
    "challenge",
    "user_id",
    "channel_id",
    "command",
    "text",
    "response_url",
    "trigger_id",
)


class Refusal(Exception):
    """An answer for a request that never reaches Bolt."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason  # metric label, from a fixed set
        self.message = message

    def response(self) -> web.Response:
        metrics.REJECTED_REQUESTS.labels("slack", self.reason).inc()
        response = web.Response(status=self.status, text=self.message + "\n")
        response.force_close()  # an unread or refused body: do not keep the connection
        return response


@dataclass(frozen=True, slots=True)
class Verified:
    """A signed request, decoded and parsed the way Bolt will parse it."""

    text: str
    body: dict[str, Any]


async def read_body(request: web.Request, *, max_bytes: int, timeout: float) -> bytes:
    """The raw body, at most `max_bytes`, fully received within `timeout` seconds."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise Refusal(413, "too_large", "request body too large")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                chunk = await request.content.read(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise Refusal(413, "too_large", "request body too large")
                chunks.append(chunk)
    except TimeoutError:
        raise Refusal(408, "slow_body", "request body not received in time") from None
    except Refusal:
        raise
    except (OSError, asyncio.IncompleteReadError, ValueError, web.HTTPException) as exc:
        raise Refusal(400, "aborted", "request body incomplete") from exc
    except Exception as exc:  # aiohttp's payload errors differ across versions
        raise Refusal(400, "aborted", "request body incomplete") from exc
    return b"".join(chunks)


def check_signature(raw: bytes, headers: Any, secret: str, *, now: float | None = None) -> None:
    """Raise a 401 `Refusal` unless Slack signed exactly these bytes in the last 5 minutes."""
    stamp = headers.get("X-Slack-Request-Timestamp") or ""
    signature = headers.get("X-Slack-Signature") or ""
    if not stamp or not signature or len(stamp) > 20 or len(signature) > 100:
        raise Refusal(401, "bad_signature", "invalid signature")
    try:
        when = int(stamp)
    except ValueError:
        raise Refusal(401, "bad_signature", "invalid signature") from None
    if abs((time.time() if now is None else now) - when) > SIGNATURE_WINDOW:
        raise Refusal(401, "stale_signature", "invalid signature")
    base = b"v0:" + stamp.encode("ascii", "replace") + b":" + raw
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode("ascii", "replace")):
        raise Refusal(401, "bad_signature", "invalid signature")


def _malformed(what: str) -> Refusal:
    return Refusal(400, "malformed", f"malformed request: {what}")


def decode(raw: bytes, content_type: str, charset: str | None) -> Verified:
    """Decode and parse a verified body; a 400 `Refusal` for anything Slack would not send."""
    if charset and charset.lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise _malformed("only UTF-8 bodies are accepted")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("body is not valid UTF-8") from None
    if not text:
        raise _malformed("empty body")
    if content_type == "application/json" or text.startswith("{"):
        body = _json_object(text)
    else:
        fields = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
        form = dict(fields)
        if "payload" in text:  # Bolt treats any form mentioning it as interactivity
            payload = form.get("payload")
            body = _json_object(payload) if payload is not None else form
        else:
            body = form
    _check_shape(body)
    return Verified(text, body)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise _malformed("body is not JSON") from None
    if not isinstance(value, dict):
        raise _malformed("body is not a JSON object")
    return value


def _check_shape(body: dict[str, Any]) -> None:
    """The fields Bolt and the listeners read must have Slack's types."""
    for key in _TOP_STRINGS:
        if key in body and not isinstance(body[key], str):
            raise _malformed(f"field {key} has the wrong type")
    for key in ("team", "user", "channel", "enterprise", "container"):
        value = body.get(key)
        if value is not None and not isinstance(value, (str, dict)):
            raise _malformed(f"field {key} has the wrong type")
        if isinstance(value, dict) and "id" in value and not isinstance(value["id"], str):
            raise _malformed(f"field {key}.id has the wrong type")
    actions = body.get("actions")  # interactivity: Bolt's matchers read each action's ids
    if actions is not None and (
        not isinstance(actions, list)
        or not all(
            isinstance(a, dict)
            and all(isinstance(a.get(k, ""), str) for k in ("action_id", "block_id", "type"))
            for a in actions
        )
    ):
        raise _malformed("field actions has the wrong type")
    auths = body.get("authorizations")
    if auths is not None and (
        not isinstance(auths, list) or not all(isinstance(a, dict) for a in auths)
    ):
        raise _malformed("field authorizations has the wrong type")
    if "event" in body:
        event = body["event"]
        if not isinstance(event, dict):
            raise _malformed("field event has the wrong type")
        for key in _EVENT_STRINGS:
            if key in event and event[key] is not None and not isinstance(event[key], str):
                raise _malformed(f"field event.{key} has the wrong type")
        for key in ("files", "blocks", "attachments"):
            if key in event and not isinstance(event[key], list):
                raise _malformed(f"field event.{key} has the wrong type")
        for key in ("edited", "message", "previous_message", "assistant_thread"):
            if key in event and not isinstance(event[key], dict):
                raise _malformed(f"field event.{key} has the wrong type")


async def verified_request(
    request: web.Request, *, secret: str, max_bytes: int, timeout: float
) -> Verified:
    """Read, verify and parse one POST; raises `Refusal` with the answer to give otherwise."""
    raw = await read_body(request, max_bytes=max_bytes, timeout=timeout)
    check_signature(raw, request.headers, secret)
    return decode(raw, request.content_type, request.charset)
