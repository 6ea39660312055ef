"""One message's files turned into model input within a token share, and into what is stored.

Per file, by what its bytes are (`bot.files.sniff`): text is inlined (cut to fit, the cut said);
an image becomes an `image_url` part when the model takes images, else a note; anything else (PDF,
archives, binaries, too large, failed downloads) is named with its size and why it was not read,
so the model can tell the person. Stored history keeps the text blocks and notes, never image
bytes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from bot.files.image_cost import image_tokens
from bot.files.images import ImageUnreadable, PreparedImage, prepare_image_bounded
from bot.files.intake import FileLimits, download, safe_name
from bot.files.sniff import decode_text, sniff
from bot.files.text import human_size, inline_text
from bot.messages import Attachment, AttachmentError
from bot.tokens import TokenCounter

MIN_TEXT_TOKENS = 32
NOT_SHOWN = "tell the person you cannot see images here if they ask about it"


@dataclass(frozen=True, slots=True)
class _Image:
    header: str
    image: PreparedImage


@dataclass
class FileInput:
    """What a message's files add to the user's message."""

    blocks: list[str] = field(default_factory=list)  # text shown to the model, in file order
    images: list[_Image] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)  # stored in the message's meta
    detail: str = "high"

    def content(self, text: str, *, with_images: bool = True) -> str | list[dict[str, Any]]:
        """The user message's content: a string, or text + image parts."""
        if not self.images or not with_images:
            blocks = list(self.blocks)
            blocks += [
                f"{img.header}; not shown: this model cannot see images — {NOT_SHOWN}]"
                for img in self.images
            ]
            return _join(text, blocks)
        parts: list[dict[str, Any]] = [
            {"type": "text", "text": _join(text, [*self.blocks, *self._image_headers()])}
        ]
        for img in self.images:
            parts.append(
                {
                    "type": "image_url",
                    "image_url": {"url": img.image.data_url, "detail": self.detail},
                }
            )
        return parts

    def stored_text(self, text: str) -> str:
        """What history keeps: the text blocks and notes as shown, images by name only."""
        kept = (f"{img.header}; the image itself is not kept]" for img in self.images)
        return _join(text, [*self.blocks, *kept])

    def _image_headers(self) -> list[str]:
        return [
            f"{img.header}; attached below as image {i}]" for i, img in enumerate(self.images, 1)
        ]


def _join(text: str, blocks: list[str]) -> str:
    return "\n\n".join([text.strip(), *blocks]) if text.strip() else "\n\n".join(blocks)


def image_cost(images: list[_Image], detail: str) -> int:
    return sum(image_tokens(i.image.width, i.image.height, detail) for i in images)


async def prepare_files(
    attachments: tuple[Attachment, ...],
    *,
    counter: TokenCounter,
    limits: FileLimits,
    share_tokens: int,
    vision: bool,
) -> FileInput:
    """Fetch, classify and fit `attachments` into `share_tokens` (text and image parts together)."""
    out = FileInput()
    planned: list[tuple[int, Attachment, str]] = []
    reported_total = 0
    notes: dict[int, str] = {}
    for i, att in enumerate(attachments):
        name = safe_name(att.name)
        if att.size > limits.max_file_bytes:
            notes[i] = _note(name, att.mime_type, att.size, _too_large(limits))
            continue
        if reported_total + att.size > limits.max_total_bytes:
            notes[i] = _note(name, att.mime_type, att.size, _over_total(limits))
            continue
        reported_total += att.size
        planned.append((i, att, name))

    fetched = await asyncio.gather(*(_fetch(att, limits) for _, att, _ in planned))
    texts: list[tuple[int, str, str, int, str]] = []  # index, name, text, size, mime
    images: dict[int, _Image] = {}
    total = 0
    for (i, att, name), data in zip(planned, fetched, strict=True):
        if isinstance(data, AttachmentError):
            notes[i] = _note(name, att.mime_type, att.size, f"could not be downloaded: {data}")
            continue
        total += len(data)
        if total > limits.max_total_bytes:
            notes[i] = _note(name, att.mime_type, len(data), _over_total(limits))
            continue
        kind = sniff(data, att.mime_type)
        if kind.kind == "text" and kind.encoding is not None:
            text = await asyncio.to_thread(decode_text, data, kind.encoding)
            texts.append((i, name, text, len(data), kind.mime_type))
        elif kind.kind == "image" and vision:
            try:
                prepared = await prepare_image_bounded(data)
            except ImageUnreadable as exc:
                notes[i] = _note(name, kind.label, len(data), f"not read: {exc}")
                continue
            header = (
                f"[image: {name} ({kind.label}, {human_size(len(data))}, "
                f"{prepared.original_width}x{prepared.original_height})"
            )
            images[i] = _Image(header, prepared)
        elif kind.kind == "image":
            header = f"[image: {name} ({kind.label}, {human_size(len(data))})"
            notes[i] = f"{header}; not shown: this model cannot see images — {NOT_SHOWN}]"
        else:
            notes[i] = _note(
                name, kind.label, len(data), "not read: I cannot read this kind of file"
            )

    image_list = [images[i] for i in sorted(images)]
    out.images = image_list
    if image_cost(image_list, "high") > share_tokens // 2:
        out.detail = "low"
    remaining = max(share_tokens - image_cost(image_list, out.detail), 0)
    blocks: dict[int, str] = dict(notes)
    records: dict[int, dict[str, Any]] = {}
    # Smallest first, each at most an equal part of what is left: small files stay whole.
    by_length = sorted(texts, key=lambda t: len(t[2]))
    for n, (i, name, text, size, mime) in enumerate(by_length):
        cap = max(remaining // (len(by_length) - n) - 48, 0)
        if cap < MIN_TEXT_TOKENS:
            blocks[i] = _note(name, mime, size, "not shown: no room left in the context")
            records[i] = {"name": name, "mime_type": mime, "size": size, "kind": "text"}
            records[i]["shown"] = "note"
            continue
        shown = await asyncio.to_thread(inline_text, counter, name, text, cap)
        remaining -= shown.shown_tokens + 48
        if shown.kept == "all":
            how = "whole file"
        elif shown.kept == "tail":
            how = (
                f"only its last {human_size(size - shown.cut_bytes)} are shown: "
                f"the first {human_size(shown.cut_bytes)} were cut"
            )
        else:
            how = f"its start and end: {human_size(shown.cut_bytes)} in the middle were cut"
        body = shown.text.rstrip("\n")
        blocks[i] = f"[file: {name} ({mime}, {human_size(size)}) — {how}]\n{body}\n[end of {name}]"
        records[i] = {
            "name": name,
            "mime_type": mime,
            "size": size,
            "kind": "text",
            "shown": shown.kept,
        }
    for i, img in images.items():
        records[i] = {
            "name": safe_name(attachments[i].name),
            "mime_type": attachments[i].mime_type,
            "size": attachments[i].size,
            "kind": "image",
            "shown": "image",
            "width": img.image.original_width,
            "height": img.image.original_height,
        }
    for i in notes:
        att = attachments[i]
        records[i] = {
            "name": safe_name(att.name),
            "mime_type": att.mime_type,
            "size": att.size,
            "kind": "other",
            "shown": "note",
        }
    out.records = [records[i] for i in sorted(records)]
    out.blocks = [blocks[i] for i in sorted(blocks)]
    return out


async def _fetch(att: Attachment, limits: FileLimits) -> bytes | AttachmentError:
    try:
        return await download(att, limits)
    except AttachmentError as exc:
        return exc


def _too_large(limits: FileLimits) -> str:
    return f"not read: larger than the {human_size(limits.max_file_bytes)} limit per file"


def _over_total(limits: FileLimits) -> str:
    return (
        f"not read: the files of one message may total at most {human_size(limits.max_total_bytes)}"
    )


def _note(name: str, kind: str, size: int, why: str) -> str:
    size_text = f", {human_size(size)}" if size else ""
    return f"[file: {name} ({kind or 'unknown type'}{size_text}) — {why}]"
