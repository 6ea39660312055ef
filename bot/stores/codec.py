"""Record <-> stored document, with upgrades of documents written by older schema versions.

Both backends read through `load`, so a row written before a field existed is upgraded the same
way everywhere. Upgrades are applied on read only; the next write stores the current version.
To change a record's shape: bump `SCHEMA_VERSION` in `records.py` and register a step here
from the previous version.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from bot.audience import UNKNOWN_FACT
from bot.stores.records import (
    SCHEMA_VERSION,
    Fact,
    StoredMessage,
    ToolCallLog,
    utcnow,
)

R = TypeVar("R", bound=BaseModel)
Doc = dict[str, Any]
Step = Callable[[Doc], Doc]

# (record type, version it upgrades *from*) -> step producing version + 1.
_STEPS: dict[tuple[type[BaseModel], int], Step] = {}


def upgrade_step(model: type[BaseModel], from_version: int) -> Callable[[Step], Step]:
    """Register `fn` as the upgrade of `model` documents from `from_version` to the next one."""

    def register(fn: Step) -> Step:
        _STEPS[(model, from_version)] = fn
        return fn

    return register


def upgrade(model: type[BaseModel], doc: Mapping[str, Any]) -> Doc:
    """Bring a stored document to `SCHEMA_VERSION` (a missing version means 0, pre-versioning)."""
    out = dict(doc)
    version = int(out.get("schema_version") or 0)
    field = model.model_fields.get("schema_version")
    target = field.default if field is not None else SCHEMA_VERSION  # a record may run ahead
    while version < target:
        step = _STEPS.get((model, version))
        if step is not None:
            out = step(out)
        version += 1
        out["schema_version"] = version
    return out


def now_ms() -> datetime:
    """Now, in UTC, to the millisecond: what BSON dates keep, so both backends return the
    very timestamp they were given."""
    now = utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def load(model: type[R], doc: Mapping[str, Any]) -> R:
    """Validate a stored document (a MongoDB `_id` or backend columns are ignored)."""
    return model.model_validate(upgrade(model, doc))


def load_json(model: type[R], raw: str | bytes) -> R:
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError(f"stored {model.__name__} is not a JSON object")
    return load(model, data)


def dump_json(record: BaseModel) -> str:
    return record.model_dump_json()


# --- version 0 -> 1: documents written before records carried `schema_version` ---------------


@upgrade_step(StoredMessage, 0)
def _message_v0(doc: Doc) -> Doc:
    # Turns were not tracked yet; each old message becomes its own turn.
    doc.setdefault("turn_id", f"legacy-{doc.get('seq', 0)}")
    return doc


@upgrade_step(ToolCallLog, 0)
def _call_v0(doc: Doc) -> Doc:
    doc.setdefault("result_size", 0)
    return doc


# --- Fact 1 -> 2: versions, subjects and source message ids -----------------------------------


@upgrade_step(Fact, 1)
def _fact_v1(doc: Doc) -> Doc:
    if doc.get("source") == "consolidation":
        doc["source"] = "inferred"
    if doc.get("valid_from") is None and doc.get("created_at") is not None:
        doc["valid_from"] = doc["created_at"]
    return doc


# --- Fact 2 -> 3: the audience it may be shown to ----------------------------------------------


@upgrade_step(Fact, 2)
def _fact_v2(doc: Doc) -> Doc:
    # Stored before facts carried where they were said: the narrowest audience (the person's
    # DMs only) unless a store migration found it from the source message.
    if not doc.get("audience"):
        doc["audience"] = UNKNOWN_FACT
    return doc
