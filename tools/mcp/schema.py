"""An MCP tool's input schema: cleaned for the model, and checked before the call.

The server's JSON Schema is the contract, so arguments are validated against it here (with
`jsonschema`) before anything is sent, and failures come back to the model in the same shape as
for the bot's own tools: `{field: "must be an integer"}`, never the input echoed. Safe coercion
comes first, as pydantic does for built-in tools: "123" for an integer, "true" for a boolean, a
null for an optional field that does not accept null (the model meant "the default").

Schemas come from a server a team admin pointed at: they are bounded (size, depth) and a schema
that is not valid JSON Schema drops that tool (with a warning) instead of breaking the turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

MAX_SCHEMA_CHARS = 16_000
MAX_DESCRIPTION_CHARS = 1_024
_DROP_KEYS = frozenset({"$schema", "title", "$id", "examples"})

ArgsCheck = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, str]]]


class BadSchema(ValueError):
    """The server's schema cannot be offered (too large, not an object schema, invalid)."""


def model_schema(raw: Any) -> dict[str, Any]:
    """The `parameters` object offered to the model: an object schema, titles dropped."""
    if not isinstance(raw, dict):
        raise BadSchema("input schema is not an object")
    if len(json.dumps(raw, default=str)) > MAX_SCHEMA_CHARS:
        raise BadSchema(f"input schema is larger than {MAX_SCHEMA_CHARS} characters")
    cleaned: dict[str, Any] = _clean(raw, 0)
    if cleaned.get("type", "object") != "object":
        raise BadSchema("input schema does not describe an object")
    cleaned["type"] = "object"
    cleaned.setdefault("properties", {})
    try:
        Draft202012Validator.check_schema(cleaned)
    except SchemaError as exc:
        raise BadSchema(f"input schema is not valid JSON Schema ({exc.message[:120]})") from None
    return cleaned


def _clean(node: Any, depth: int) -> Any:
    if depth > 32:
        raise BadSchema("input schema is nested too deeply")
    if isinstance(node, dict):
        return {
            k: _clean(v, depth + 1)
            for k, v in node.items()
            if not (k in _DROP_KEYS and isinstance(v, str | list))
        }
    if isinstance(node, list):
        return [_clean(v, depth + 1) for v in node]
    return node


def checker(schema: dict[str, Any]) -> ArgsCheck:
    """`check(args) -> (coerced args, {field: problem})` for one tool's schema."""
    validator = Draft202012Validator(schema)

    def check(args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        fixed = _coerce(args, schema)
        problems: dict[str, str] = {}
        for err in sorted(validator.iter_errors(fixed), key=lambda e: list(e.path)):
            for path, message in _describe(err, schema):
                problems.setdefault(path, message)
            if len(problems) >= 20:
                break
        return fixed, problems

    return check


def _types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    out: list[str] = []
    for alt in schema.get("anyOf", []) or schema.get("oneOf", []) or []:
        out.extend(_types(alt))
    return out


def _coerce(value: Any, schema: Any) -> Any:
    """Safe coercions only: numeric and boolean strings, nulls meaning "the default"."""
    if not isinstance(schema, dict):
        return value
    types = _types(schema)
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        props: dict[str, Any] = schema["properties"]
        required = set(schema.get("required") or [])
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = props.get(key)
            if item is None and key not in required and sub is not None:
                if "null" not in _types(sub):
                    continue  # the model left it out, in its own way
            out[key] = _coerce(item, sub) if sub is not None else item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_coerce(v, schema["items"]) for v in value]
    if isinstance(value, str) and "string" not in types:
        text = value.strip()
        if "integer" in types:
            try:
                return int(text)
            except ValueError:
                pass
        if "number" in types:
            try:
                number = float(text)
            except ValueError:
                pass
            else:
                if number == number and abs(number) != float("inf"):
                    return int(number) if number.is_integer() and "." not in text else number
        if "boolean" in types and text.lower() in ("true", "false"):
            return text.lower() == "true"
    if isinstance(value, float) and "integer" in types and value.is_integer():
        return int(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and types == ["string"]:
        return str(value)
    return value


def _field(path: list[Any]) -> str:
    return ".".join(str(p) for p in path) or "arguments"


def _describe(err: ValidationError, root: dict[str, Any]) -> list[tuple[str, str]]:
    path = list(err.absolute_path)
    kind = err.validator
    value = err.validator_value
    if kind == "required":
        missing = [m for m in value if isinstance(err.instance, dict) and m not in err.instance]
        return [(_field([*path, m]), "required") for m in missing] or [(_field(path), "required")]
    if kind == "additionalProperties":
        known = ", ".join(err.schema.get("properties", {})) or "none"
        extra = [k for k in err.instance if k not in err.schema.get("properties", {})]
        return [(_field([*path, k]), f"not allowed (known fields: {known})") for k in extra[:10]]
    if kind == "enum":
        return [(_field(path), "must be one of " + ", ".join(str(v) for v in value))]
    if kind == "const":
        return [(_field(path), f"must be {value}")]
    if kind == "type":
        wanted = value if isinstance(value, list) else [value]
        names = {
            "integer": "an integer",
            "number": "a number",
            "string": "a string",
            "boolean": "true or false",
            "object": "an object",
            "array": "a list",
            "null": "null",
        }
        return [(_field(path), "must be " + " or ".join(names.get(w, str(w)) for w in wanted))]
    if kind in ("minLength", "maxLength"):
        if kind == "minLength" and value == 1:
            return [(_field(path), "must not be empty")]
        word = "at least" if kind == "minLength" else "at most"
        return [(_field(path), f"must be {word} {value} characters")]
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
        return [(_field(path), f"must be {op[kind]} {value}")]
    if kind in ("minItems", "maxItems"):
        word = "at least" if kind == "minItems" else "at most"
        return [(_field(path), f"must have {word} {value} items")]
    if kind == "pattern":
        return [(_field(path), f"must match the pattern {value}")]
    if kind == "format":
        return [(_field(path), f"must be a valid {value}")]
    if kind in ("anyOf", "oneOf"):
        return [(_field(path), "does not match any of the allowed forms")]
    return [(_field(path), "invalid value")]
