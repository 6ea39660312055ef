"""JSON schema for the model, and field-level messages for what fails validation.

Tool schemas sit in the cached prompt prefix, so they are cleaned of pydantic's noise (`title`,
`$defs`/`$ref` for simple nested models) and generated once per tool, byte-identical on every
turn. Validation messages name the field and say what is expected ("unit: must be one of
celsius, fahrenheit") without echoing the input, which may hold personal data.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

_SUBSCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_SUBSCHEMA_ONE = frozenset(
    {"items", "additionalProperties", "not", "contains", "if", "then", "else"}
)
_SUBSCHEMA_LIST = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The `parameters` object of an OpenAI function tool for `model`.

    Titles are dropped, non-recursive `$ref`s are inlined, every object with properties gets
    `additionalProperties: false`, and `required` is always present at the top level.
    """
    raw = model.model_json_schema()
    defs: dict[str, Any] = raw.pop("$defs", {})
    kept: dict[str, Any] = {}
    cleaned: dict[str, Any] = _clean(raw, defs, (), kept)
    out: dict[str, Any] = {
        "type": "object",
        "properties": cleaned.pop("properties", {}),
        "required": cleaned.pop("required", []),
        "additionalProperties": False,
    }
    cleaned.pop("type", None)
    cleaned.pop("additionalProperties", None)
    out.update(cleaned)  # e.g. a model docstring's description
    if kept:
        out["$defs"] = {name: kept[name] for name in sorted(kept)}
    return out


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Paths of keys the schema does not allow (`additionalProperties: false`), at any depth.

    Pydantic forbids extras only on models configured so; nested models of a tool's arguments
    may silently drop them, while the schema sent to the model promises an error. This walk
    keeps that promise for every object the schema describes.
    """
    found: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            for key, sub in value.items():
                where = f"{path}.{key}" if path else str(key)
                if key in props:
                    found.extend(unknown_fields(sub, props[key], where))
                elif schema.get("additionalProperties") is False:
                    found.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found.extend(unknown_fields(item, schema["items"], f"{path}[{i}]"))
    for alt in schema.get("anyOf", []) if isinstance(value, dict | list) else []:
        if isinstance(alt, dict) and (alt.get("properties") or alt.get("items")):
            found.extend(unknown_fields(value, alt, path))
            break
    return found


def _clean(node: Any, defs: dict[str, Any], stack: tuple[str, ...], kept: dict[str, Any]) -> Any:
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        siblings = {k: v for k, v in node.items() if k not in ("$ref", "title")}
        if name in stack or name not in defs:
            # Recursive model: keep the reference and ship that one definition.
            if name in defs and name not in kept:
                kept[name] = {}
                kept[name] = _clean(defs[name], defs, (*stack, name), kept)
            return {"$ref": ref, **_clean(siblings, defs, stack, kept)}
        inlined = _clean(defs[name], defs, (*stack, name), kept)
        return {**inlined, **_clean(siblings, defs, stack, kept)}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            out[key] = {n: _clean(s, defs, stack, kept) for n, s in value.items()}
        elif key in _SUBSCHEMA_ONE and isinstance(value, dict):
            out[key] = _clean(value, defs, stack, kept)
        elif key in _SUBSCHEMA_LIST and isinstance(value, list):
            out[key] = [_clean(s, defs, stack, kept) for s in value]
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


def field_errors(exc: ValidationError, schema: dict[str, Any]) -> dict[str, str]:
    """`{"unit": "must be one of celsius, fahrenheit", "location": "required"}`.

    Field paths are dotted (`items.0.name`); the first message per field wins.
    """
    props: dict[str, Any] = schema.get("properties", {})
    out: dict[str, str] = {}
    for err in exc.errors(include_url=False, include_input=False):
        loc = err.get("loc", ())
        path = ".".join(str(p) for p in loc) or "arguments"
        if path in out:
            continue
        sub = props.get(str(loc[0])) if len(loc) == 1 else None
        out[path] = _message(err["type"], err.get("msg", ""), err.get("ctx") or {}, sub, props)
    return out


def _enum_of(sub: Any) -> list[Any] | None:
    if not isinstance(sub, dict):
        return None
    if isinstance(sub.get("enum"), list):
        return list(sub["enum"])
    for alt in sub.get("anyOf", ()):
        if isinstance(alt, dict) and isinstance(alt.get("enum"), list):
            return list(alt["enum"])
    return None


def _message(kind: str, msg: str, ctx: dict[str, Any], sub: Any, props: dict[str, Any]) -> str:
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        allowed = ", ".join(props) or "none"
        return f"not allowed (known fields: {allowed})"
    if kind in ("literal_error", "enum"):
        values = _enum_of(sub)
        if values is not None:
            return "must be one of " + ", ".join(str(v) for v in values)
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"must be one of {expected}" if expected else "not an allowed value"
    if kind.startswith("int_"):
        return "must be an integer"
    if kind.startswith("float_") or kind.startswith("decimal_"):
        return "must be a number"
    if kind.startswith("bool_"):
        return "must be true or false"
    if kind == "string_type":
        return "must be a string"
    if kind.startswith("date_") and not kind.startswith("datetime"):
        return "must be a date as YYYY-MM-DD"
    if kind.startswith("datetime_"):
        return "must be a date and time as YYYY-MM-DDTHH:MM:SS"
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind in ("too_short", "too_long"):
        return msg.replace("List should have", "must have").replace("Value should", "must")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<"}.get(kind, "<=")
        bound = next(iter(ctx.values()), "")
        return f"must be {op} {bound}"
    if kind == "string_pattern_mismatch":
        return f"must match the pattern {ctx.get('pattern')}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be an object"
    if kind in ("list_type", "tuple_type", "set_type"):
        return "must be a list"
    if kind in ("value_error", "assertion_error"):
        return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return msg.replace("Input should be", "must be") or "invalid value"
