"""Structured logging for the adapter: an event name plus fields, never tokens or message text."""

from __future__ import annotations

import logging
from typing import Any


def emit(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log `name` with `fields` under `extra["fields"]`, the shape the bot's log formatter reads."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={"fields": fields})
