"""Turning Web API failures into a short code, a metric and a log line (never the token)."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError

from adapters.common.logs import emit
from bot import metrics


def error_code(exc: BaseException) -> str:
    """Slack's `error` field for API errors (e.g. `ratelimited`), else the exception type."""
    if isinstance(exc, SlackApiError):
        try:
            return str(exc.response.get("error") or "unknown")
        except Exception:
            return "unknown"
    return type(exc).__name__


def api_failed(logger: logging.Logger, method: str, exc: BaseException, **fields: object) -> str:
    """Count and log one failed Web API call; returns the error code."""
    code = error_code(exc)
    metrics.PLATFORM_API_ERRORS.labels("slack", method).inc()
    emit(logger, "slack_api_failed", logging.WARNING, method=method, error=code, **fields)
    return code
