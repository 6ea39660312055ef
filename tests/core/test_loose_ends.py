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
    assert not hasattr(bot.messages, "CollectingSink")  # lives in testkit/sinks.py
    assert not hasattr(ToolPack, "parse_args")  # tools.packs.parse_settings is the one parser


def test_tool_context_has_only_typed_fields() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(ToolContext)}
    assert "extras" not in fields
    assert all("dict" not in str(t) and "Any" not in str(t) for t in fields.values()), fields


def test_functions_nothing_called_are_gone() -> None:
    """Issue 21: names with no caller in bot/, adapters/, tools/, bench/ or the CLI."""
    import adapters.discord.endpoints
    import bot.memory.episodic.retrieval
    import bot.memory.fact_support
    import bot.text
    from adapters.slack.connguard import ConnectionGuard
    from bot.memory.episodic.retrieval import Retriever

    assert not hasattr(adapters.discord.endpoints, "current_api_url")
    assert not hasattr(adapters.discord.endpoints, "current_gateway_url")
    assert not hasattr(ConnectionGuard, "open_connections")
    assert not hasattr(Retriever, "forget_cache")
    assert not hasattr(bot.memory.episodic.retrieval, "as_vector")
    assert not hasattr(bot.memory.fact_support, "support")  # `supported` is the one used
    assert not hasattr(bot.text, "clean_optional")


def test_one_embedder_protocol() -> None:
    """Issue 21: `bot.embeddings.base.Embedder` only; tool selection takes an `embed` callable."""
    import tools.selection

    assert not hasattr(tools.selection, "Embedder")
    assert "embed" in inspect.signature(tools.selection.ToolSelector).parameters
