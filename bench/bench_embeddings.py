"""CPU per embedding of the local model, per variant (bot/embeddings/local.py), at a few input
lengths, plus how close the int8 vectors are to the fp32 ones.

    python bench/bench_embeddings.py [--tokens 8,32,128] [--runs N] [--json PATH]

One text per call through `LocalEmbedder.embed_sync` (tokenizer, onnxruntime, pooling), CPU time
of the calling thread (independent of the machine's load, unlike wall time), median of the
rounds. Needs the `embeddings` extra; the int8 file is built first if it is not cached yet.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.needs import require_embeddings  # noqa: E402
from bench.report import Figure, add_json_option, info, print_figures, write_json  # noqa: E402

WORDS = "the order for lisbon ships on friday and the team will call you back about it".split()


def text_of(tokens: int) -> str:
    """A sentence of exactly `tokens` WordPiece tokens, [CLS] and [SEP] included."""
    words = [WORDS[i % len(WORDS)] for i in range(tokens - 2)]
    return " ".join(words)


def cpu_ms(embedder: Any, text: str, runs: int) -> float:
    for _ in range(3):
        embedder.embed_sync([text])
    rounds = []
    for _ in range(5):
        start = time.thread_time()
        for _ in range(runs):
            embedder.embed_sync([text])
        rounds.append((time.thread_time() - start) / runs * 1000)
    return statistics.median(rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", default="8,32,128")
    parser.add_argument("--runs", type=int, default=20)
    add_json_option(parser)
    args = parser.parse_args(argv)
    require_embeddings("bench_embeddings")
    from bot.embeddings import local

    lengths = [int(t) for t in args.tokens.split(",")]
    embedders = {v: local.LocalEmbedder(variant=v) for v in local.VARIANTS}
    for embedder in embedders.values():
        embedder.embed_sync(["load"])
    checked = embedders["fp32"]._tokenizer  # the same tokenizer for both
    figures: list[Figure] = []
    print("CPU per embedding (ms, one text per call, median of 5 rounds)")
    print(f"{'tokens':>6}  " + "  ".join(f"{e.name:>30}" for e in embedders.values()))
    for n in lengths:
        text = text_of(n)
        assert len(checked.encode(text).ids) == n, n
        row = {v: cpu_ms(e, text, args.runs) for v, e in embedders.items()}
        print(f"{n:>6}  " + "  ".join(f"{row[v]:>30.2f}" for v in embedders))
        for v, ms in row.items():
            name = embedders[v].name
            figures.append(info(f"CPU per embedding, {n} tokens, {name}", ms, "ms"))
    sample = [text_of(n) for n in lengths] + [
        "Wednesday 14 January 2026\nAlice: I'm allergic to peanuts.\nBot: Noted, no peanuts.",
        "When does the Lisbon order ship?",
    ]
    a, b = (embedders[v].embed_sync(sample) for v in ("qint8", "fp32"))
    cosines = (a * b).sum(axis=1)
    print(f"cosine int8 vs fp32 on {len(sample)} texts: min {cosines.min():.4f}")
    figures.append(info("cosine int8 vs fp32, min", round(float(cosines.min()), 4)))
    print_figures("embeddings", figures)
    write_json(args.json, "embeddings", figures)
    for embedder in embedders.values():
        embedder._executor.shutdown(wait=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
