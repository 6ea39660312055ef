"""The episodic-memory embedder also ranks tools (tools.selection) when one is configured."""

from __future__ import annotations

from typing import Any


async def test_the_memory_embedder_ranks_tools_too(make_app: Any) -> None:
    app = await make_app(episodic=True, bot_embedding_model="text-embedding-3-small")
    assert app.episodic is not None and app.episodic.embedder is not None
    assert app.toolboxes.selector.embed == app.episodic.embedder.embed


async def test_lexical_only_without_an_embedder(make_app: Any) -> None:
    app = await make_app(episodic=True)
    assert app.toolboxes.selector.embed is None


async def test_an_embedder_outage_falls_back_to_lexical_ranking() -> None:
    from tools.selection import ToolSelector

    class Down:
        async def embed(self, texts: Any) -> Any:
            raise ConnectionError("embeddings endpoint down")

    schemas = [
        {"type": "function", "function": {"name": n, "description": d, "parameters": {}}}
        for n, d in (("get_weather", "Weather forecast for a city"), ("get_order", "Order status"))
    ]
    selector = ToolSelector(embed=Down().embed)
    assert await selector.dense(schemas, "will it rain in Lisbon?") == {}
    await selector.choose(schemas, "will it rain in Lisbon?", always=())  # does not raise
