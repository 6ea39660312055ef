"""A tool's structured result checked against the output schema its server declared.

The MCP spec says a server that lists an `outputSchema` for a tool MUST return structured
content that conforms to it; a result that does not is a broken answer, and the model is told
so (a business error naming the first problems) instead of reading data of the wrong shape.

The SDK would check this itself, on the event loop with `re` patterns; the inbound layer takes
the schema out of its sight (`tools.mcp.trim` keeps it under `SCHEMA_META` in the tool's
`_meta`) and the check runs here instead: in a worker thread, with the same guarded validator as
input schemas (`tools.mcp.schema`: no remote `$ref`, `pattern` on `regex` with a time budget).
A declared schema that is not usable (not JSON Schema, a remote `$ref`, a pattern `regex`
cannot compile) drops the tool at listing, as a bad input schema does. Bounded: schemas over
`MAX_SCHEMA_CHARS` are not kept (the tool's results go unchecked, with one
log line at listing), and structured content over `tools.mcp.trim.SHRINK_ABOVE` is shortened for
the model before it arrives here (`SHRUNK_META`); a shortened value is no longer the server's
data, so it is shown as shortened and not checked.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from tools.errors import ToolBusinessError
from tools.mcp.schema import (
    CHECK_BUDGET,
    MAX_SCHEMA_CHARS,
    NO_FETCH,
    BadSchema,
    Validator,
    check_refs_and_patterns,
    clean,
    deadline,
    describe,
)
from tools.mcp.trim import SCHEMA_META, SHRUNK_META

__all__ = ["SCHEMA_META", "SHRUNK_META", "OutputCheck", "output_checker"]


OutputCheck = Callable[[Any, Any], Awaitable[None]]


def output_checker(raw: Any) -> OutputCheck | None:
    """`await check(structured_content, meta)` raising ToolBusinessError on a mismatch; None when
    the tool declares no output schema. BadSchema when the declared one is not usable."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadSchema("output schema is not an object")
    # Measured as the trimming measures it (compact), which keeps only schemas within this.
    if len(json.dumps(raw, separators=(",", ":"), default=str)) > MAX_SCHEMA_CHARS:
        raise BadSchema(f"output schema is larger than {MAX_SCHEMA_CHARS} characters")
    try:
        schema: dict[str, Any] = clean(raw, 0)
        Validator.check_schema(schema)
        check_refs_and_patterns(schema, "")
    except SchemaError as exc:
        raise BadSchema(f"output schema is not valid JSON Schema ({exc.message[:120]})") from None
    except BadSchema as exc:  # the shared checks speak of input schemas
        raise BadSchema(str(exc).replace("input schema", "output schema")) from None
    validator = Validator(schema, registry=NO_FETCH)

    def problems(value: Any) -> list[str]:
        token = deadline.set(time.monotonic() + CHECK_BUDGET)
        try:
            errors = list(validator.iter_errors(value))
        except Unresolvable:
            return ["it cannot be checked (the schema has a broken $ref)"]
        finally:
            deadline.reset(token)
        found: list[str] = []
        for err in sorted(errors, key=lambda e: [str(p) for p in e.path])[:20]:
            for path, message in describe(err, schema):
                found.append(f"{path} {message}")
        return found[:5]

    async def check(structured: Any, meta: Any) -> None:
        if isinstance(meta, dict) and meta.get(SHRUNK_META):
            return
        if structured is None:
            raise ToolBusinessError(
                "The tool's answer is broken: its server declares structured output for it but "
                "sent none. Tell the user the tool did not answer properly."
            )
        found = await asyncio.to_thread(problems, structured)
        if found:
            raise ToolBusinessError(
                "The tool's answer is broken: it does not match the output schema its server "
                f"declares ({'; '.join(found)}), so it was not used. Tell the user the tool did "
                "not answer properly."
            )

    return check
