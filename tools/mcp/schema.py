"""An MCP tool's input schema: cleaned for the model, and checked before the call.

The server's JSON Schema is the contract, so arguments are validated against it here (with
`jsonschema`) before anything is sent, and failures come back to the model in the same shape as
for the bot's own tools: `{field: "must be an integer"}`, never the input echoed. Safe coercion
comes first, as pydantic does for built-in tools: "123" for an integer, "true" for a boolean, a
null for an optional field that does not accept null (the model meant "the default").

Schemas come from a server a team admin pointed at: they are bounded (size, depth) and a schema
that is not valid JSON Schema drops that tool (with a warning) instead of breaking the turn.

Two things in a schema would let the server reach past its own answer, and both are closed:

- **References to other documents are never resolved.** jsonschema's default registry fetches a
  remote `$ref` with a blocking `urlopen` (no timeout, outside the host guard) while validating.
  A schema with a `$ref`/`$dynamicRef` that is not local (`#...`) drops the tool at load, and the
  validator's registry refuses any retrieval anyway (belt and braces; an unresolvable reference
  reads as "cannot be checked", never a fetch).
- **`pattern` runs on the `regex` library with a timeout**, not `re`: the server picks the
  pattern (`^(a+)+$`), the model picks the string, and `re` backtracks exponentially while
  holding the GIL. Each search has a short timeout and one argument check has a total budget;
  a search that runs out counts as "does not match" (the call is refused with that field named),
  never as a pass. The same goes for `patternProperties` keys. Patterns that `regex` cannot
  compile drop the tool at load.
"""

from __future__ import annotations

import contextvars
import functools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import regex
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.validators import extend
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable

MAX_SCHEMA_CHARS = 16_000
MAX_DESCRIPTION_CHARS = 1_024
_DROP_KEYS = frozenset({"$schema", "title", "$id", "examples"})

PATTERN_TIMEOUT = 0.05  # seconds one `pattern` search may take
CHECK_BUDGET = 0.25  # seconds all pattern searches of one argument check may take together
_REF_KEYS = ("$ref", "$dynamicRef")

ArgsCheck = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, str]]]


class BadSchema(ValueError):
    """The server's schema cannot be offered (too large, not an object schema, invalid)."""


def model_schema(raw: Any) -> dict[str, Any]:
    """The `parameters` object offered to the model: an object schema, titles dropped."""
    if not isinstance(raw, dict):
        raise BadSchema("input schema is not an object")
    if len(json.dumps(raw, default=str)) > MAX_SCHEMA_CHARS:
        raise BadSchema(f"input schema is larger than {MAX_SCHEMA_CHARS} characters")
    cleaned: dict[str, Any] = clean(raw, 0)
    if cleaned.get("type", "object") != "object":
        raise BadSchema("input schema does not describe an object")
    cleaned["type"] = "object"
    cleaned.setdefault("properties", {})
    try:
        Draft202012Validator.check_schema(cleaned)
    except SchemaError as exc:
        raise BadSchema(f"input schema is not valid JSON Schema ({exc.message[:120]})") from None
    check_refs_and_patterns(cleaned, "")
    return cleaned


def check_refs_and_patterns(node: Any, key: str) -> None:
    """Refuse non-local references and patterns `regex` cannot compile (at load, once)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in _REF_KEYS and isinstance(v, str) and not v.startswith("#"):
                raise BadSchema(
                    "input schema refers to another document; remote references are never fetched"
                )
            if k == "pattern" and isinstance(v, str) and key != "properties":
                _compile_or_refuse(v)
            if k == "patternProperties" and isinstance(v, dict):
                for p in v:
                    _compile_or_refuse(p)
            check_refs_and_patterns(v, k)
    elif isinstance(node, list):
        for v in node:
            check_refs_and_patterns(v, key)


def _compile_or_refuse(pattern: str) -> None:
    try:
        _compiled(pattern)
    except (regex.error, TypeError, ValueError, OverflowError):
        raise BadSchema("input schema has a pattern that cannot be compiled") from None


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern)


def _refuse_retrieval(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


NO_FETCH: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
"""Resolves only within the schema (and jsonschema's bundled metaschemas); fetches nothing."""

deadline: contextvars.ContextVar[float] = contextvars.ContextVar("pattern_deadline", default=0.0)


def _search(pattern: str, text: str) -> bool | None:
    """Does `pattern` match somewhere in `text`? None when it could not tell in time."""
    left = deadline.get() - time.monotonic()
    if left <= 0:
        return None
    try:
        return (
            _compiled(pattern).search(text, timeout=min(PATTERN_TIMEOUT, left), concurrent=True)
            is not None
        )
    except TimeoutError:
        deadline.set(0.0)  # one slow search spends the rest of the budget: stop trying
        return None
    except (regex.error, TypeError, ValueError, OverflowError):
        return None


def _pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(str(patrn), instance):
        yield ValidationError("does not match the pattern")


def _pattern_properties(
    validator: Any, pattern_properties: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for k, v in instance.items():
            found = _search(str(pattern), str(k))
            if found is None:
                yield ValidationError(
                    f"key {k[:40]!r} could not be checked", validator="additionalProperties"
                )
            elif found:
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


Validator = extend(
    Draft202012Validator,
    validators={"pattern": _pattern, "patternProperties": _pattern_properties},
)


def clean(node: Any, depth: int) -> Any:
    if depth > 32:
        raise BadSchema("input schema is nested too deeply")
    if isinstance(node, dict):
        return {
            k: clean(v, depth + 1)
            for k, v in node.items()
            if not (k in _DROP_KEYS and isinstance(v, str | list))
        }
    if isinstance(node, list):
        return [clean(v, depth + 1) for v in node]
    return node


def checker(schema: dict[str, Any]) -> ArgsCheck:
    """`check(args) -> (coerced args, {field: problem})` for one tool's schema."""
    validator = Validator(schema, registry=NO_FETCH)

    def check(args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        fixed = _coerce(args, schema)
        problems: dict[str, str] = {}
        token = deadline.set(time.monotonic() + CHECK_BUDGET)
        try:
            errors = sorted(validator.iter_errors(fixed), key=lambda e: [str(p) for p in e.path])
        except Unresolvable:
            return fixed, {"arguments": "cannot be checked (the tool's schema has a broken $ref)"}
        finally:
            deadline.reset(token)
        for err in errors:
            for path, message in describe(err, schema):
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


def describe(err: ValidationError, root: dict[str, Any]) -> list[tuple[str, str]]:
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
