"""The registry: lookup, sorted deterministic schemas, cheap per-turn composition."""

from __future__ import annotations

import json

import pytest

from tools.declare import Injected, tool
from tools.registry import ToolRegistry


@tool(description="B tool.")
async def b_tool(x: int = 0) -> int:
    return x


@tool(description="A tool.")
async def a_tool(y: str = "") -> str:
    return y


@tool(description="Needs a dependency.")
async def needs_dep(dep: Injected[str]) -> str:
    return dep


def test_names_and_schemas_are_sorted_and_stable() -> None:
    reg = ToolRegistry([b_tool, a_tool])
    assert reg.names() == ["a_tool", "b_tool"]
    schemas = reg.openai_schemas()
    assert [s["function"]["name"] for s in schemas] == ["a_tool", "b_tool"]
    assert reg.schemas_json() == ToolRegistry([a_tool, b_tool]).schemas_json()
    assert json.loads(reg.schemas_json()) == schemas
    schemas[0]["function"]["name"] = "mutated"
    assert reg.openai_schemas()[0]["function"]["name"] == "a_tool"


def test_get_contains_len_iter() -> None:
    reg = ToolRegistry([a_tool])
    assert reg.get("a_tool") is a_tool and reg.get("missing") is None
    assert "a_tool" in reg and "b_tool" not in reg
    assert len(reg) == 1 and list(reg) == [a_tool]


def test_composition_leaves_the_base_unchanged() -> None:
    base = ToolRegistry([a_tool])
    turn = base | [b_tool]
    assert turn.names() == ["a_tool", "b_tool"]
    assert base.names() == ["a_tool"]
    assert (base | ToolRegistry([b_tool])).names() == ["a_tool", "b_tool"]
    assert base.with_tools([needs_dep.bind(dep="x")]).names() == ["a_tool", "needs_dep"]


def test_duplicates_and_unbound_tools_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate tool name 'a_tool'"):
        ToolRegistry([a_tool]) | [a_tool]
    with pytest.raises(ValueError, match="missing dependencies"):
        ToolRegistry([needs_dep])
