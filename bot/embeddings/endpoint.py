"""Embeddings from the model endpoint's `/embeddings` (OpenAI or any compatible server)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from openai import AsyncOpenAI, OpenAIError

from bot.embeddings.base import EmbeddingError, Vectors, normalise

if TYPE_CHECKING:
    from bot.usage.meter import UsageMeter

MAX_BATCH = 128  # inputs per request (OpenAI accepts 2048; local servers often far fewer)
MAX_CHARS = 8000  # per input: longer texts are cut rather than refused by the server


class EndpointEmbedder:
    def __init__(
        self, model: str, *, api_key: str, base_url: str | None, timeout: float = 30.0
    ) -> None:
        self.model = model
        self.name = f"endpoint:{model}"
        self._client = AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=2
        )
        self.meter: UsageMeter | None = None  # set by the app: embeddings are metered too

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        rows: list[list[float]] = []
        for start in range(0, len(texts), MAX_BATCH):
            batch = [t[:MAX_CHARS] or " " for t in texts[start : start + MAX_BATCH]]
            try:
                response = await self._client.embeddings.create(model=self.model, input=batch)
            except OpenAIError as exc:
                raise EmbeddingError(f"embeddings endpoint failed: {type(exc).__name__}") from exc
            if self.meter is not None:
                usage = getattr(response, "usage", None)
                tokens = getattr(usage, "prompt_tokens", None)
                # No usage sent: a character estimate (4 per token), not tiktoken over a batch
                # of up to a million characters on the event loop.
                counted = isinstance(tokens, int)
                self.meter.record(
                    "embedding",
                    self.model,
                    prompt=tokens if counted else max(1, sum(map(len, batch)) // 4),
                    cached=0,
                    completion=0,
                    estimated=not counted,
                )
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise EmbeddingError("embeddings endpoint returned the wrong number of vectors")
            rows.extend(list(d.embedding) for d in data)
        return normalise(rows)

    async def close(self) -> None:
        await self._client.close()
