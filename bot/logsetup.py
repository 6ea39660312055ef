"""Structured logging: JSON lines when stderr is not a terminal, key=value lines when it is.

Call sites log an event name as the message and put data in `extra={"fields": {...}}`. Those
fields are the only data that reaches the log: by convention they hold ids, counts, durations and
outcomes, never tokens, keys or message text (see `redact`).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_SECRET_HINTS = ("token", "secret", "key", "password", "authorization")


def redact(fields: dict[str, Any]) -> dict[str, Any]:
    """Blank out any field whose name suggests a credential, as a last line of defence."""
    clean: dict[str, Any] = {}
    for name, value in fields.items():
        lowered = name.lower()
        if any(hint in lowered for hint in _SECRET_HINTS) and not lowered.endswith(
            ("tokens", "_tokens", "token_count")
        ):
            clean[name] = "[redacted]"
        else:
            clean[name] = value
    return clean


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            payload.update(redact(fields))
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False, default=str)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        parts = [f"{record.levelname.lower():<7} {record.name}: {record.getMessage()}"]
        if isinstance(fields, dict):
            parts.extend(f"{k}={v}" for k, v in redact(fields).items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str = "INFO", *, json_lines: bool | None = None) -> None:
    """Route all logs to stderr, structured. Libraries' chatter is kept at WARNING."""
    if json_lines is None:
        json_lines = not sys.stderr.isatty()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else KeyValueFormatter())
    root = logging.getLogger()
    handler.addFilter(_quiet_libraries)
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


_NOISY = (
    "httpx",
    "httpx2",
    "httpcore",
    "openai",
    "slack_bolt",
    "slack_sdk",
    "discord",
    "pymongo",
    "aiohttp.access",
)


def _quiet_libraries(record: logging.LogRecord) -> bool:
    """Drop libraries' records below WARNING even where they set their own logger levels (Bolt
    copies the root level onto its loggers, and logs request bodies at INFO)."""
    if record.levelno >= logging.WARNING:
        return True
    return not any(record.name == n or record.name.startswith(n + ".") for n in _NOISY)
