"""The small HTML page a browser shows at the end of a tool sign-in."""

from __future__ import annotations

import html


def page(ok: bool, text: str) -> str:
    title = "Connected" if ok else "Not connected"
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>'
        f"{title}</title></head><body><h1>{title}</h1><p>{html.escape(text)}</p></body></html>"
    )
