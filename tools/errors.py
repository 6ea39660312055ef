"""Exceptions a tool raises on purpose, so the executor can classify failures.

The executor shows the model different things for each kind: a business error verbatim (the
model can act on "order #W1 not found"), a transient error as "temporarily unavailable" after
bounded retries, an argument error as field-level feedback. Anything else is a bug: logged with
its trace, shown to the model only as a generic message.
"""

from __future__ import annotations


class ToolError(Exception):
    """Base of the errors a tool raises deliberately."""


class ToolBusinessError(ToolError):
    """An expected failure of the request itself ("order #W1 not found"): shown as-is, no retry.

    The message goes to the model verbatim, so it must not contain secrets or stack traces.
    """


class ToolTransientError(ToolError):
    """The upstream is down, slow or rate-limited (5xx, 429, connection reset): worth a retry."""


class ToolArgumentError(ToolError):
    """An argument passed schema validation but is still wrong (a date outside the window).

    Reported like a validation failure: outcome "bad_arguments" with `{field: message}`.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ToolTimedOut(ToolError, TimeoutError):
    """The tool's own deadline passed (an upstream that went quiet): handled like the executor's
    timeout (retried when read-only, "may or may not have been done" for a write), its message
    saying why. The message is shown to the model, so it must not contain secrets."""
