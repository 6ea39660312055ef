"""What a shared file is, judged by its bytes (the platform's MIME type and the name are hints).

A file named `notes.txt` may be a zip and `build.out` a perfectly readable log: signatures of
known binary formats win, then the bytes are checked for being text (no NULs, few control
characters, decodable). Nothing here parses or unpacks the file beyond that.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Literal

Kind = Literal["text", "image", "binary"]

SAMPLE_BYTES = 8192
# Images the model APIs take (OpenAI: PNG, JPEG, GIF, WEBP) plus two Pillow re-encodes cheaply.
_IMAGE_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
)
_BINARY_SIGNATURES: tuple[tuple[bytes, str, str], ...] = (
    (b"%PDF-", "application/pdf", "PDF document"),
    (b"PK\x03\x04", "application/zip", "ZIP archive (or an Office document)"),
    (b"PK\x05\x06", "application/zip", "ZIP archive"),
    (b"\x1f\x8b", "application/gzip", "gzip archive"),
    (b"BZh", "application/x-bzip2", "bzip2 archive"),
    (b"\xfd7zXZ\x00", "application/x-xz", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed", "7-Zip archive"),
    (b"Rar!\x1a\x07", "application/vnd.rar", "RAR archive"),
    (b"\x7fELF", "application/x-executable", "executable"),
    (b"MZ", "application/x-msdownload", "Windows executable"),
    (b"\xcf\xfa\xed\xfe", "application/x-mach-binary", "executable"),
    (b"SQLite format 3\x00", "application/vnd.sqlite3", "SQLite database"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "application/msword", "legacy Office document"),
)
_ALLOWED_CONTROL = frozenset(b"\t\n\r\f\b\x1b")  # tabs, newlines, ANSI colour escapes in logs


@dataclass(frozen=True, slots=True)
class Sniffed:
    kind: Kind
    mime_type: str  # what the bytes say (falls back to the platform's type)
    label: str  # short human description: "PDF document", "PNG image", "text"
    encoding: str | None = None  # for text


def _is_webp(data: bytes) -> bool:
    return data[:4] == b"RIFF" and data[8:12] == b"WEBP"


def sniff(data: bytes, declared_mime: str = "") -> Sniffed:
    """Classify `data`. Only the first few KB are inspected (cost independent of file size)."""
    head = data[:SAMPLE_BYTES]
    if _is_webp(head):
        return Sniffed("image", "image/webp", "WEBP image")
    for signature, mime in _IMAGE_SIGNATURES:
        if head.startswith(signature) and (signature != b"BM" or len(head) > 26):
            return Sniffed("image", mime, mime.split("/")[1].upper() + " image")
    for signature, mime, label in _BINARY_SIGNATURES:
        if head.startswith(signature):
            return Sniffed("binary", mime, label)
    encoding = text_encoding(head)
    if encoding is not None:
        mime = declared_mime if declared_mime.startswith("text/") else "text/plain"
        if declared_mime in _TEXTUAL_APPLICATION_TYPES:
            mime = declared_mime
        return Sniffed("text", mime, "text", encoding)
    return Sniffed("binary", declared_mime or "application/octet-stream", "binary file")


_TEXTUAL_APPLICATION_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
        "application/toml",
        "application/x-ndjson",
    }
)


def text_encoding(sample: bytes) -> str | None:
    """The encoding `sample` reads as text in, or None when it looks binary."""
    if sample.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if not sample:
        return "utf-8"
    if b"\x00" in sample:
        return None
    controls = sum(1 for b in sample if b < 32 and b not in _ALLOWED_CONTROL)
    if controls > len(sample) // 100:
        return None
    try:
        # The sample may end inside a multi-byte character: an incremental decoder allows that.
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
        return "utf-8"
    except UnicodeDecodeError:
        pass
    high = sum(1 for b in sample if b >= 0x80)
    # Mostly ASCII with some 8-bit letters: a legacy single-byte text (Windows-1252 as a guess).
    return "cp1252" if high <= len(sample) // 4 else None


def decode_text(data: bytes, encoding: str) -> str:
    """The whole file as text; undecodable bytes become U+FFFD instead of failing."""
    return data.decode(encoding, "replace")
