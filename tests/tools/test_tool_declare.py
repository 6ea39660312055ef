"""Declaring tools: the schema the model sees, context and dependency injection, mistakes."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from tools.declare import Injected, Tool, declare, tool
from tools.types import ToolContext


class Client:
    pass


async def _weather(
    location: Annotated[str, Field(description="The full city name.")],
    unit: Annotated[Literal["celsius", "fahrenheit"], Field(description="Unit.")] = "celsius",
    days: int = 1,
    *,
    ctx: ToolContext,
    client: Injected[Client],
) -> dict[str, Any]:
    """Get the weather.

    Second paragraph stays in the description.
    """
    return {"location": location, "unit": unit, "days": days, "session": ctx.session_id}


def test_function_schema_has_openai_shape() -> None:
    t = declare(_weather)
    schema = t.openai_schema()
    assert schema == {
        "type": "function",
        "function": {
            "name": "_weather",
            "description": "Get the weather.\n\nSecond paragraph stays in the description.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"description": "The full city name.", "type": "string"},
                    "unit": {
                        "default": "celsius",
                        "description": "Unit.",
                        "enum": ["celsius", "fahrenheit"],
                        "type": "string",
                    },
                    "days": {"default": 1, "type": "integer"},
                },
                "required": ["location"],
                "additionalProperties": False,
            },
        },
    }
    # The context and the injected dependency never reach the model.
    assert t.context_arg == "ctx"
    assert t.injected == frozenset({"client"})


def test_schema_is_byte_identical_across_calls_and_declarations() -> None:
    a, b = declare(_weather), declare(_weather)
    assert a.schema_json == b.schema_json
    assert json.dumps(a.openai_schema()) == json.dumps(a.openai_schema())
    # openai_schema hands out copies: mutating one does not change the tool.
    a.openai_schema()["function"]["name"] = "changed"
    assert a.openai_schema()["function"]["name"] == "_weather"


class Address(BaseModel):
    street: str = Field(description="Street and number.")
    city: str


class Recursive(BaseModel):
    name: str
    children: list[Recursive] = []


def test_nested_models_are_inlined_without_titles() -> None:
    @tool(description="Ship it.")
    async def ship(to: Address, note: str | None = None) -> None:
        return None

    params = ship.parameters
    text = json.dumps(params)
    assert "$defs" not in text and "$ref" not in text and '"title"' not in text
    assert params["properties"]["to"] == {
        "type": "object",
        "properties": {
            "street": {"description": "Street and number.", "type": "string"},
            "city": {"type": "string"},
        },
        "required": ["street", "city"],
        "additionalProperties": False,
    }
    assert params["properties"]["note"]["default"] is None


def test_a_field_named_title_is_kept() -> None:
    @tool(description="Create a ticket.")
    async def ticket(title: Annotated[str, Field(description="Short title.")]) -> None:
        return None

    assert ticket.parameters["properties"] == {
        "title": {"description": "Short title.", "type": "string"}
    }


def test_recursive_models_keep_only_the_needed_defs() -> None:
    @tool(description="Tree.")
    async def tree(root: Recursive) -> None:
        return None

    params = tree.parameters
    assert set(params["$defs"]) == {"Recursive"}
    assert params["properties"]["root"]["properties"]["children"]["items"] == {
        "$ref": "#/$defs/Recursive"
    }


class OrderArgs(BaseModel):
    order_id: str = Field(description="The order id.")
    quantity: int = 1


def test_model_declared_tool_receives_the_model() -> None:
    seen: list[OrderArgs] = []

    @tool(description="Cancel an order.", write=True, timeout=3, args=OrderArgs)
    async def cancel(args: OrderArgs, ctx: ToolContext) -> str:
        seen.append(args)
        return ctx.speaker_id

    assert cancel.write and cancel.timeout == 3
    assert cancel.model_arg == "args" and cancel.context_arg == "ctx"
    assert cancel.parameters["required"] == ["order_id"]
    assert cancel.parameters["additionalProperties"] is False


async def test_invoke_passes_context_and_bound_dependencies() -> None:
    client = Client()
    t = declare(_weather).bind(client=client)
    args = t.args_model.model_validate({"location": "Berlin", "days": "3"})
    out = await t.invoke(args, ToolContext("s1", "u1", "t1"))
    assert out == {"location": "Berlin", "unit": "celsius", "days": 3, "session": "s1"}
    assert t.bound["client"] is client


def test_bind_rejects_unknown_names_and_shares_the_schema() -> None:
    t = declare(_weather)
    assert t.missing_deps == {"client"}
    bound = t.bind(client=Client())
    assert bound.missing_deps == frozenset()
    assert bound.schema_json is t.schema_json and bound.args_model is t.args_model
    with pytest.raises(TypeError, match="nope"):
        t.bind(nope=1)


def test_bad_declarations_fail_early() -> None:
    def sync(x: int) -> int:
        return x

    async def nodoc(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="async"):
        declare(sync)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="description"):
        declare(nodoc)
    with pytest.raises(ValueError, match="name"):
        declare(nodoc, name="has space", description="x")
    with pytest.raises(ValueError, match="timeout"):
        declare(nodoc, description="x", timeout=0)


def test_decorator_forms() -> None:
    @tool
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    assert isinstance(ping, Tool) and ping.description == "Answer pong."
    assert ping.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
