"""Declaring a tool once, as a typed async function or a pydantic model plus a handler.

The function's signature is the single source of truth: a pydantic model is built from its
parameters (type hints, defaults, `Literal` enums, `Annotated[..., Field(description=...)]`), and
the OpenAI function-tool schema is generated from that model once, at declaration time, so it is
cheap and byte-identical on every turn.

Two kinds of parameters never reach the schema:
- one annotated `ToolContext` receives the caller's context;
- ones annotated `Injected[T]` are dependencies (an HTTP client, a pack's config) supplied with
  `Tool.bind(...)`. A pack declares its tools at import time and binds them per install, which
  costs a `dataclasses.replace`, not a schema build.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, create_model

from tools.schema import parameters_schema
from tools.types import ToolContext

T = TypeVar("T")


class _InjectedMarker:
    def __repr__(self) -> str:
        return "Injected"


INJECTED = _InjectedMarker()
Injected = Annotated[T, INJECTED]
"""`client: Injected[OrdersClient]`: a dependency supplied by `Tool.bind`, not by the model."""

ToolFn = Callable[..., Awaitable[Any]]

DEFAULT_TIMEOUT = 15.0
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ARGS_CONFIG = ConfigDict(extra="forbid", coerce_numbers_to_str=True)
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False)
class Tool:
    """A declared tool: metadata, argument model, cached schema and the async callable.

    `write=True` marks a tool that changes something; the executor makes such calls idempotent
    per request (message) and arguments. `timeout` (seconds) bounds each attempt.
    """

    name: str
    description: str
    fn: ToolFn
    args_model: type[BaseModel]
    write: bool = False
    timeout: float = DEFAULT_TIMEOUT
    model_arg: str | None = None  # receives the whole model instance (model-declared tools)
    context_arg: str | None = None
    injected: frozenset[str] = frozenset()
    bound: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    schema_json: str = ""  # the OpenAI tool schema, compact JSON, computed once
    provider: str = ""  # circuit-breaker key (one upstream: a pack or one install); "" = none
    # Tools described by a JSON Schema of their own (MCP): coerces and checks the arguments
    # object before `args_model`, returning (arguments, {field: problem}).
    check_args: Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, str]]] | None = None

    def openai_schema(self) -> dict[str, Any]:
        """A fresh copy of `{"type": "function", "function": {...}}` (safe to mutate)."""
        result: dict[str, Any] = json.loads(self.schema_json)
        return result

    @property
    def parameters(self) -> dict[str, Any]:
        params: dict[str, Any] = self.openai_schema()["function"]["parameters"]
        return params

    @property
    def missing_deps(self) -> frozenset[str]:
        return self.injected - self.bound.keys()

    def bind(self, **deps: Any) -> Tool:
        """A copy with `Injected` dependencies supplied; schema and model are shared."""
        unknown = deps.keys() - self.injected
        if unknown:
            raise TypeError(f"tool {self.name} has no injected parameter(s) {sorted(unknown)}")
        return dataclasses.replace(self, bound=MappingProxyType({**self.bound, **deps}))

    def with_provider(self, provider: str) -> Tool:
        """A copy whose calls go through the circuit breaker of `provider`."""
        return dataclasses.replace(self, provider=provider)

    async def invoke(self, args: BaseModel, ctx: ToolContext) -> Any:
        """Call the function with validated arguments, the context and bound dependencies."""
        if self.model_arg is not None:
            kwargs: dict[str, Any] = {self.model_arg: args}
        else:
            kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.context_arg is not None:
            kwargs[self.context_arg] = ctx
        if self.bound:
            kwargs.update(self.bound)
        return await self.fn(**kwargs)


@overload
def tool(fn: ToolFn, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    write: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    args: type[BaseModel] | None = None,
) -> Callable[[ToolFn], Tool]: ...


def tool(
    fn: ToolFn | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    write: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    args: type[BaseModel] | None = None,
) -> Tool | Callable[[ToolFn], Tool]:
    """Declare a tool: `@tool` or `@tool(description=..., write=True, timeout=5, args=Model)`.

    The description defaults to the function's docstring. With `args=Model`, the schema comes
    from `Model` and the function's first ordinary parameter receives the validated instance.
    """

    def wrap(f: ToolFn) -> Tool:
        return declare(
            f, name=name, description=description, write=write, timeout=timeout, args=args
        )

    return wrap(fn) if fn is not None else wrap


def declare(
    fn: ToolFn,
    *,
    name: str | None = None,
    description: str | None = None,
    write: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    args: type[BaseModel] | None = None,
) -> Tool:
    """Build a `Tool` from an async function (see `tool`). Raises TypeError/ValueError early."""
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool {fn.__name__!r} must be an async function")
    tool_name = name or fn.__name__
    if not _NAME_RE.match(tool_name):
        raise ValueError(f"tool name {tool_name!r} must match {_NAME_RE.pattern}")
    desc = inspect.cleandoc(description or fn.__doc__ or "")
    if not desc:
        raise ValueError(f"tool {tool_name!r} needs a description (argument or docstring)")
    if timeout <= 0:
        raise ValueError(f"tool {tool_name!r}: timeout must be positive")
    hints = _hints(fn)

    context_arg: str | None = None
    injected: set[str] = set()
    fields: dict[str, Any] = {}
    model_arg: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args/**kwargs are not supported")
        hint = hints.get(param.name, Any)
        if hint is _UNRESOLVED and args is None:
            raise TypeError(f"tool {tool_name!r}: cannot resolve the type of {param.name!r}")
        if hint is ToolContext:
            context_arg = param.name
        elif _is_injected(hint):
            injected.add(param.name)
        elif args is not None:
            if model_arg is not None:
                raise TypeError(f"tool {tool_name!r}: with args=Model, take one argument")
            model_arg = param.name
        else:
            if param.name.startswith("_"):
                raise TypeError(f"tool {tool_name!r}: parameter names may not start with '_'")
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (hint, default)

    if args is not None:
        if model_arg is None:
            raise TypeError(f"tool {tool_name!r}: with args=Model, take the model as a parameter")
        model = _forbid_extra(args)
    else:
        model = create_model(f"{tool_name}_args", __config__=_ARGS_CONFIG, **fields)

    schema = {
        "type": "function",
        "function": {
            "name": tool_name,
            "description": desc,
            "parameters": parameters_schema(model),
        },
    }
    return Tool(
        name=tool_name,
        description=desc,
        fn=fn,
        args_model=model,
        write=write,
        timeout=timeout,
        model_arg=model_arg,
        context_arg=context_arg,
        injected=frozenset(injected),
        schema_json=json.dumps(schema, ensure_ascii=False, separators=(",", ":")),
    )


_UNRESOLVED = object()


def _hints(fn: ToolFn) -> dict[str, Any]:
    """Type hints with `Annotated` kept; with a hint naming a local class (string annotations),
    the others are still resolved and that one is marked unresolved (fine for `args=Model`)."""
    try:
        return get_type_hints(fn, include_extras=True)
    except Exception:
        pass
    out: dict[str, Any] = {}
    for name, ann in getattr(fn, "__annotations__", {}).items():
        try:  # what get_type_hints does per name: the annotation text in the module's globals
            out[name] = eval(ann, getattr(fn, "__globals__", {})) if isinstance(ann, str) else ann
        except Exception:
            out[name] = _UNRESOLVED
    return out


def _is_injected(hint: Any) -> bool:
    return get_origin(hint) is Annotated and any(m is INJECTED for m in get_args(hint)[1:])


def _forbid_extra(model: type[BaseModel]) -> type[BaseModel]:
    """Unknown fields are errors the model should hear about, as the schema promises."""
    if model.model_config.get("extra") == "forbid":
        return model
    config = ConfigDict(**{**model.model_config, "extra": "forbid"})
    return type(model.__name__, (model,), {"model_config": config, "__module__": model.__module__})
