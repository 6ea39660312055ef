"""Names the model sees for an MCP server's tools: `<pack name>_<tool name>`.

Namespacing by the install's name keeps two servers (or a server and a built-in) from
colliding; the result must match the model API's `^[a-zA-Z0-9_-]{1,64}$`. Characters outside
that set become `_`; a name that would be too long, or collide after that mapping, is cut and
given a short hash of the server's own name so it stays stable across refreshes.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 64
_BAD = re.compile(r"[^A-Za-z0-9_-]")
PACK_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,23}$")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:6]


def tool_name(pack: str, server_name: str) -> str:
    """`crm` + `search.tickets` -> `crm_search_tickets` (stable, within the API's rules)."""
    base = f"{pack}_{_BAD.sub('_', server_name)}"
    if len(base) <= MAX_NAME and base == f"{pack}_{server_name}":
        return base
    suffix = "_" + _digest(server_name)
    return base[: MAX_NAME - len(suffix)] + suffix


def namespace(pack: str, server_names: list[str]) -> dict[str, str]:
    """Model-facing name -> the server's own name, for every tool (collisions resolved)."""
    out: dict[str, str] = {}
    for name in server_names:
        mapped = tool_name(pack, name)
        if mapped in out and out[mapped] != name:
            suffix = "_" + _digest(name)
            mapped = mapped[: MAX_NAME - len(suffix)] + suffix
        if mapped not in out:
            out[mapped] = name
    return out
