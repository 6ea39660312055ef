"""The set of tools offered in one turn: built-ins plus the packs installed for the team.

A registry is an immutable name -> Tool mapping; composing one per turn (`base | pack_tools`)
copies a small dict, and the schema list for the model is cached per registry in name order so
the prompt prefix stays byte-identical while the installed packs do not change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from tools.declare import Tool


class ToolRegistry:
    """Tools by name. Duplicate names are rejected: two tools answering to one name is a bug."""

    __slots__ = ("_schemas_json", "_tools")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._schemas_json: str | None = None
        for t in tools:
            self._add(t)

    def _add(self, t: Tool) -> None:
        if t.name in self._tools:
            raise ValueError(f"duplicate tool name {t.name!r}")
        if t.missing_deps:
            raise ValueError(f"tool {t.name!r} is missing dependencies {sorted(t.missing_deps)}")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def with_tools(self, tools: Iterable[Tool]) -> ToolRegistry:
        """A new registry with these tools added (this one is unchanged)."""
        return ToolRegistry([*self._tools.values(), *tools])

    def __or__(self, other: ToolRegistry | Iterable[Tool]) -> ToolRegistry:
        return self.with_tools(other._tools.values() if isinstance(other, ToolRegistry) else other)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._tools)

    def schemas_json(self) -> str:
        """The `tools` array as compact JSON, sorted by name; identical across calls."""
        if self._schemas_json is None:
            self._schemas_json = "[" + ",".join(t.schema_json for t in self) + "]"
        return self._schemas_json

    def openai_schemas(self) -> list[dict[str, Any]]:
        """The `tools` parameter of a Chat Completions request (fresh dicts, sorted by name)."""
        result: list[dict[str, Any]] = json.loads(self.schemas_json())
        return result
