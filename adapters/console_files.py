"""`/attach PATH` in `bot chat`: a local file offered to the core like a shared Slack file.

The file is only described when attached (name, type guessed from the name, size); its bytes are
read when the core fetches it, bounded like a download (a larger file is refused, not cut).
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from pathlib import Path

from bot.messages import Attachment, AttachmentError


class AttachRefused(Exception):
    """The path cannot be attached; the message is one line for the person at the terminal."""


def _read(path: Path, max_bytes: int) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise AttachmentError(f"it could not be read ({reason})") from None
    if len(data) > max_bytes:
        raise AttachmentError("it is larger than the limit per file")
    return data


class _LocalFetch:
    def __init__(self, path: Path) -> None:
        self.path = path

    async def __call__(self, max_bytes: int) -> bytes:
        return await asyncio.to_thread(_read, self.path, max_bytes)


def local_attachment(raw_path: str) -> Attachment:
    """An `Attachment` for a path typed after `/attach` (quotes and `~` allowed)."""
    text = raw_path.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    if not text:
        raise AttachRefused("usage: /attach PATH (then your message, or an empty line)")
    path = Path(os.path.expanduser(text))
    try:
        info = path.stat()
    except OSError as exc:
        raise AttachRefused(f"cannot attach {text}: {exc.strerror or 'not found'}") from None
    if not path.is_file():
        raise AttachRefused(f"cannot attach {text}: not a regular file")
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return Attachment(
        name=path.name, mime_type=mime, size=info.st_size, fetch=_LocalFetch(path), id=str(path)
    )
