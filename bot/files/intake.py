"""Limits on what one message may bring in, and the bounded download of each file.

Counts and sizes are checked against what the platform reported before anything is fetched;
`fetch` is asked for at most the per-file byte limit (the adapter refuses a larger body) and is
bounded in time here, so a slow or huge upload can hold a turn for `download_timeout` at most.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bot.files.text import human_size
from bot.messages import Attachment, AttachmentError

log = logging.getLogger(__name__)

MAX_NAME_CHARS = 120


@dataclass(frozen=True, slots=True)
class FileLimits:
    """`BOT_MAX_FILES`, `BOT_FILE_MAX_BYTES`, `BOT_FILES_MAX_TOTAL_BYTES`, `BOT_FILE_TIMEOUT`."""

    max_files: int = 5
    max_file_bytes: int = 10 * 1024 * 1024
    max_total_bytes: int = 25 * 1024 * 1024
    download_timeout: float = 20.0


def too_many_files_reply(count: int, limit: int) -> str:
    return (
        f"You shared {count} files in one message; I can take at most {limit} at a time. "
        "Nothing was read — please send them again in smaller groups."
    )


def safe_name(name: str) -> str:
    """A file name as shown to the model and stored: one line, bounded, no bracket games."""
    cleaned = " ".join(name.replace("[", "(").replace("]", ")").split()) or "file"
    if len(cleaned) > MAX_NAME_CHARS:
        cleaned = cleaned[: MAX_NAME_CHARS - 1] + "…"
    return cleaned


async def download(attachment: Attachment, limits: FileLimits) -> bytes:
    """The file's bytes, or `AttachmentError` with a one-line reason (never another error)."""
    try:
        async with asyncio.timeout(limits.download_timeout):
            data = await attachment.fetch(limits.max_file_bytes)
    except AttachmentError:
        raise
    except TimeoutError:
        raise AttachmentError(
            f"the download took longer than {limits.download_timeout:g} seconds"
        ) from None
    except Exception as exc:  # an adapter's bug must not end the turn
        log.warning(
            "attachment_fetch_failed",
            extra={"fields": {"error": type(exc).__name__, "id": attachment.id}},
        )
        raise AttachmentError("the download failed") from None
    if len(data) > limits.max_file_bytes:
        raise AttachmentError(f"it is larger than the {human_size(limits.max_file_bytes)} limit")
    return data
