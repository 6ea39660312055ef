"""Code that only tests called is gone (issue 7): each name below had no production caller."""

from __future__ import annotations

import dataclasses
import inspect

import bot.messages
from bot.model import ModelClient
from bot.stores.mongo import MongoStore
from bot.stores.protocols import Store
from bot.stores.resilient_cache import ResilientCache
from bot.stores.sqlite import SqliteStore
from tools.packs import ToolPack
from tools.types import ToolContext


def test_test_only_code_is_gone() -> None:
    assert "on_usage" not in inspect.signature(ModelClient).parameters
    for store in (Store, SqliteStore, MongoStore):
        assert not hasattr(store, "delete_state")
    assert not hasattr(ResilientCache, "degraded")
    assert not hasattr(bot.messages, "CollectingSink")  # lives in tests/helpers.py
    assert not hasattr(ToolPack, "parse_args")  # tools.packs.parse_settings is the one parser


def test_tool_context_has_only_typed_fields() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(ToolContext)}
    assert "extras" not in fields
    assert all("dict" not in str(t) and "Any" not in str(t) for t in fields.values()), fields
