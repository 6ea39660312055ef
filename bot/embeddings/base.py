"""The embedder protocol. Vectors are L2-normalised float32 rows, so a dot product is a cosine.

`name` identifies the vector space (model + how it is run): vectors are stored with it and two
names are never compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class EmbeddingError(Exception):
    """The embedder could not embed (endpoint down, model missing); retrieval goes lexical."""


class Embedder(Protocol):
    name: str

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """One normalised row per text; CPU or network work never blocks the event loop."""

    async def close(self) -> None: ...


def normalise(rows: npt.ArrayLike) -> Vectors:
    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    out: Vectors = (matrix / np.clip(norms, 1e-12, None)).astype(np.float32)
    return out
