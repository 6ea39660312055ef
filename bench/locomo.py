"""Episodic retrieval on LoCoMo: turn-level evidence recall@k through the bot's real paths.

    python -m bench.locomo --data ../shared/data/locomo/locomo_dev.json \
        [--k 5,10,25] [--embedder local|none|NAME] [--json PATH] [--conversations N]
        [--no-folds] [--distractors 0,10000,100000]

Each conversation is replayed session by session, with its dates, through the real write path:
its turns are appended to a conversation store (SQLite, in a temporary directory) as messages of
the two speakers, two people in one conversation place, each message dated by its session (the
adapter's `sent_at`); the indexer then indexes the session as it does after a turn (excerpts,
embeddings, the memory index). A turn's shared photo is part of what was said, as its caption
("[shares a photo: ...]"), the way an attachment description would be.

Then every question of categories 1-4 is asked through the real retrieval path
(`bot.memory.episodic.retrieval.Retriever`), scoped to that conversation's place, "now" being
the day after its last session. Results are mapped back to the source turns' `dia_id`s, in rank
order; recall@k counts at most k distinct source turns (an excerpt spanning three turns spends
three of the k) and is the share of a question's evidence turns found, averaged over questions.
Query latency includes embedding the question. Nothing here is tuned per conversation or
question. `--json PATH` writes the result with its figures (`bench.report`); the targets (issue
9) are for the local embedder: recall@10 ≥ 70 %, recall@25 ≥ 82 %, query p95 < 30 ms.
`--conversations N` replays only the first N (a quick run; figures not comparable).
`--distractors N,...` also measures every conversation mixed with N other turns of its audience
(bench/locomo_distractors.py says how they are made).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.locomo_distractors import MAX_DISTRACTORS, run_distractors
from bench.locomo_folds import (
    PRECISION_TARGET,
    Conversation,
    Question,
    QuestionVectors,
    cross_validate,
    grid,
    measure,
    summary,
)
from bench.needs import require_embeddings
from bench.report import Figure, at_least, at_most, below, info, print_figures, write_json
from bench.speed import reference_ms
from bot.embeddings.base import Embedder
from bot.embeddings.factory import LOCAL_CHOICES, open_embedder, resolve_choice
from bot.keys import PersonKey, SessionKey, TeamKey
from bot.memory.episodic.excerpts import message_meta
from bot.memory.episodic.indexer import Indexer
from bot.memory.episodic.retrieval import Retriever
from bot.memory.episodic.service import MAX_RESULTS
from bot.memory.episodic.tuning import DEFAULT, Tuning
from bot.stores.index_sqlite import SqliteMemoryIndex
from bot.stores.memory_index import MemoryScope, place_id
from bot.stores.records import NewMessage
from bot.stores.sqlite import SqliteStore

# Ranking as it was before issue 25: the old gate ("Recall pulls in noise"), no second hop.
BEFORE = Tuning(
    rrf_k=10,
    dense_weight=0.5,
    lexical_gate=0.5,
    gate_terms=2,
    common_share=1.0,
    common_min=10,
    terms_coverage=0.0,
    unseen_max=1.0,
    info_min=0.0,
    dense_gate=0.45,
    dense_margin=0.0,
    lexical_floor=0.1,
    dense_floor=0.25,
    candidates=200,
    hop_weight=0.0,
)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)
_MONTH_NAMES = "january february march april may june july august september october november"
_MONTHS = {m: i + 1 for i, m in enumerate(f"{_MONTH_NAMES} december".split())}


def parse_date(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023"."""
    m = _DATE.search(text)
    if m is None:
        raise ValueError(f"unrecognised LoCoMo date: {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime(int(year), _MONTHS[month.lower()], int(day), h, int(minute), tzinfo=UTC)


def _user_id(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name) or "speaker"


def _turn_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text") or "").strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def _evidence(qa: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for item in qa.get("evidence") or []:
        for part in re.split(r"[;,\s]+", str(item)):
            if re.fullmatch(r"D\d+:\d+", part.strip()):
                out.add(part.strip())
    return out


async def replay(
    sample: dict[str, Any], root: Path, embedder: Embedder | None
) -> tuple[Retriever, MemoryScope, dict[str, str], datetime, int, float, list[Any]]:
    store = await SqliteStore.open(root / "bot.db")
    index = await SqliteMemoryIndex.open(root / "memory.db")
    indexer = Indexer(store, index, embedder)
    started = time.perf_counter()
    scope, source_to_dia, now, turns = await write_conversation(sample, store, indexer)
    ingest_s = time.perf_counter() - started
    closers = [store, index]
    return (Retriever(index, embedder), scope, source_to_dia, now, turns, ingest_s, closers)


async def write_conversation(
    sample: dict[str, Any], store: Any, indexer: Indexer
) -> tuple[MemoryScope, dict[str, str], datetime, int]:
    """The conversation through the real write path: (its place's scope, source id -> dia_id,
    "now" for its questions, turns written)."""
    conv = sample["conversation"]
    sample_id = _user_id(str(sample.get("sample_id", "conv")))
    team = TeamKey("locomo", sample_id)
    session = SessionKey("locomo", sample_id, "conversation")
    source_to_dia: dict[str, str] = {}
    numbers = sorted(
        int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]
    )
    last = datetime(2000, 1, 1, tzinfo=UTC)
    turns = 0
    for n in numbers:
        when = parse_date(str(conv.get(f"session_{n}_date_time", "")))
        last = max(last, when)
        batch: list[NewMessage] = []
        dias: list[str] = []
        for i, turn in enumerate(conv[f"session_{n}"]):
            text = _turn_text(turn)
            if not text:
                continue
            person = PersonKey("locomo", sample_id, _user_id(str(turn["speaker"])))
            batch.append(
                NewMessage(
                    role="user",
                    content=text,
                    speaker=person.id,
                    turn_id=str(turn["dia_id"]),
                    name=str(turn["speaker"]),
                    meta=message_meta(
                        sent_at=when + timedelta(seconds=30 * i), private_place=False
                    ),
                )
            )
            dias.append(str(turn["dia_id"]))
        stored = await store.append(session, batch)
        for message, dia in zip(stored, dias, strict=True):
            source_to_dia[f"{message.session}#{message.seq}"] = dia
        turns += len(stored)
        await indexer.index_session(session)
    scope = MemoryScope(team, (place_id("locomo", sample_id, "conversation"),))
    return scope, source_to_dia, last + timedelta(days=1), turns


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = json.loads(await asyncio.to_thread(Path(args.data).read_text, encoding="utf-8"))
    if args.conversations:
        data = data[: args.conversations]
    ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    embedder = open_embedder(args.embedder, api_key=args.api_key, base_url=args.base_url)
    convs: list[Conversation] = []
    closers: list[Any] = []
    turns_total, ingest_total = 0, 0.0
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        try:
            for n, sample in enumerate(data):
                retriever, scope, to_dia, now, turns, ingest_s, closing = await replay(
                    sample, Path(tmp) / f"c{n}", embedder
                )
                closers.extend(closing)
                turns_total += turns
                ingest_total += ingest_s
                await retriever.search(scope, "warm up", now=now, limit=1)
                convs.append(conversation(retriever, scope, to_dia, now, sample))
            result = await figures_of(convs, ks, args.folds, embedder is not None)
            if sizes := _sizes(args.distractors):
                result["distractors"] = await run_distractors(
                    data,
                    sizes,
                    ks,
                    embedder,
                    _replay_into(embedder),
                    parse_date,
                    _turn_text,
                    progress=_print_distractor_row,
                )
        finally:
            for closer in closers:
                await closer.close()
            if embedder is not None:
                await embedder.close()
    return {
        "data": str(args.data),
        "conversations": len(data),
        "embedder": embedder.name if embedder is not None else "none",
        **result,
        "ingest": {
            "turns": turns_total,
            "seconds": round(ingest_total, 2),
            "turns_per_s": round(turns_total / ingest_total, 1) if ingest_total else 0.0,
        },
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "speed_reference_ms": round(reference_ms(), 1),
    }


def _sizes(spec: str) -> list[int]:
    sizes = [int(part) for part in spec.split(",") if part.strip()]
    if any(n < 0 or n > MAX_DISTRACTORS for n in sizes):
        raise SystemExit(f"--distractors: each N must be within 0..{MAX_DISTRACTORS:,}")
    return sizes


def _replay_into(embedder: Embedder | None) -> Any:
    async def replay_into(
        sample: dict[str, Any], store: Any, index: Any, indexer: Indexer
    ) -> tuple[Retriever, MemoryScope, dict[str, str], datetime, list[Question], int]:
        scope, to_dia, now, turns = await write_conversation(sample, store, indexer)
        return Retriever(index, embedder), scope, to_dia, now, conversation_questions(sample), turns

    return replay_into


def conversation_questions(sample: dict[str, Any]) -> list[Question]:
    return [
        Question(str(qa["question"]), int(qa["category"]), _evidence(qa))
        for qa in sample.get("qa", [])
        if int(qa.get("category", 0)) in CATEGORIES and _evidence(qa)
    ]


def conversation(
    retriever: Retriever,
    scope: MemoryScope,
    to_dia: dict[str, str],
    now: datetime,
    sample: dict[str, Any],
) -> Conversation:
    questions, adversarial = [], []
    for qa in sample.get("qa", []):
        category, evidence = int(qa.get("category", 0)), _evidence(qa)
        if category in CATEGORIES and evidence:
            questions.append(Question(str(qa["question"]), category, evidence))
        elif category == 5 and qa.get("question"):
            adversarial.append(str(qa["question"]))
    return Conversation(retriever, scope, to_dia, now, questions, adversarial)


def _rounded(summary_: dict[str, Any]) -> dict[str, Any]:
    out = dict(summary_)
    out["recall_at"] = {k: round(v, 4) for k, v in summary_["recall_at"].items()}
    out["per_category"] = {
        CATEGORIES[c]: {k: round(v, 4) for k, v in at.items()}
        for c, at in summary_["per_category"].items()
    }
    for name in ("foreign_recalled", "adversarial_recalled", "blocks_with_evidence"):
        out[name] = round(summary_[name], 4)
    return out


async def figures_of(
    convs: list[Conversation], ks: list[int], folds: bool, dense: bool
) -> dict[str, Any]:
    """Full dev at the shipped tuning (with latencies) and at the gate before issue 25; then,
    with `folds`, the grid over every conversation and the cross-validated figures."""
    every = list(range(len(convs)))
    measured = await measure(convs, DEFAULT, ks, time.perf_counter)
    latencies = sorted(ms for m in measured for ms in m.latencies_ms)

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 2)

    full = _rounded(summary(convs, measured, every))
    before = _rounded(summary(convs, await measure(convs, BEFORE, ks, time.perf_counter), every))
    result: dict[str, Any] = {
        "questions": full["questions"],
        "recall_at": full["recall_at"],
        "per_category": {
            name: {
                "questions": sum(
                    1 for c in convs for q in c.questions if CATEGORIES[q.category] == name
                ),
                "recall_at": at,
            }
            for name, at in full["per_category"].items()
        },
        "precision": {
            k: full[k] for k in ("foreign_recalled", "adversarial_recalled", "blocks_with_evidence")
        },
        "query_ms": {"p50": pct(0.5), "p95": pct(0.95), "max": round(latencies[-1], 2)},
        "no_result_questions": sum(m.no_result for m in measured),
        "before_noise_gate": before,
    }
    if folds and len(convs) > 1:
        for conv in convs:
            if conv.retriever.embedder is not None:
                conv.retriever.embedder = QuestionVectors(conv.retriever.embedder)
        settings = grid(DEFAULT, dense)
        table = [await measure(convs, t, ks, time.perf_counter) for t in settings]
        cv = cross_validate(convs, settings, table)
        result["cross_validated"] = {
            "settings": len(settings),
            "folds": [_rounded(f) for f in cv["folds"]],
            "held_out": _rounded(cv["held_out"]),
        }
        for conv in convs:
            conv.retriever.tuning = DEFAULT
    return result


TARGETS = {"10": 70.0, "25": 82.0}  # recall@k, %, with the local embedder (issue 9)
P95_TARGET_MS = 30.0


def figures(result: dict[str, Any]) -> list[Figure]:
    """Targets hold for the local embedder; other embedders are reported beside it."""
    embedder = str(result["embedder"])
    targeted = embedder.startswith("local")
    label = (
        "local embedder"
        if targeted
        else "lexical only"
        if embedder == "none"
        else f"embedder {embedder}"
    )
    out: list[Figure] = []
    for k, value in result["recall_at"].items():
        name, pct = f"LoCoMo recall@{k}, {label}", round(value * 100, 1)
        if targeted and k in TARGETS:
            out.append(at_least(name, pct, TARGETS[k], "%"))
        else:
            out.append(info(name, pct, "%"))
    p95 = float(result["query_ms"]["p95"])
    name = f"LoCoMo query p95 incl. embedding, {label}"
    out.append(below(name, p95, P95_TARGET_MS, "ms") if targeted else info(name, p95, "ms"))
    out.append(info(f"LoCoMo query p50, {label}", result["query_ms"]["p50"], "ms"))
    precision = result["precision"]
    out.append(
        at_most(
            f"LoCoMo questions of another conversation that get memories, {label}",
            round(precision["foreign_recalled"] * 100, 1),
            PRECISION_TARGET * 100,
            "%",
        )
    )
    cv = result.get("cross_validated")
    if cv is not None:
        for k, value in cv["held_out"]["recall_at"].items():
            out.append(
                info(f"LoCoMo held-out-fold recall@{k}, {label}", round(value * 100, 1), "%")
            )
    return out


def _print_distractor_row(row: dict[str, Any]) -> None:
    q = row["query_ms"]
    print(
        f"with {row['distractors']:,} distractor turns ({row['backend']}, "
        f"{row['entries_per_place']:,} entries a place): recall {_at(row['recall_at'])}, "
        f"query p50 {q['p50']} ms, p95 {q['p95']} ms, distractor ingest {row['ingest_s']} s",
        flush=True,
    )


def _at(recall: dict[str, float]) -> str:
    return "  ".join(f"@{k} {v * 100:.1f}%" for k, v in recall.items())


def _print_precision(found: dict[str, Any]) -> None:
    print(
        f"  questions of another conversation that get memories: "
        f"{found['foreign_recalled'] * 100:.1f}% (target <= {PRECISION_TARGET * 100:g}%)\n"
        f"  category-5 (adversarial) questions that get memories: "
        f"{found['adversarial_recalled'] * 100:.1f}%\n"
        f"  recalled blocks holding an evidence turn: {found['blocks_with_evidence'] * 100:.1f}%"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.locomo", description=__doc__)
    parser.add_argument("--data", required=True, help="a file in LoCoMo's format")
    parser.add_argument("--k", default="5,10,25", help="comma-separated cut-offs")
    parser.add_argument(
        "--embedder",
        default=None,
        help="local | local-qint8 | local-fp32 | none | a model name at the endpoint",
    )
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument(
        "--conversations", type=int, default=0, help="only the first N conversations (0: all)"
    )
    parser.add_argument(
        "--no-folds",
        dest="folds",
        action="store_false",
        help="skip the k-fold grid (only the full-dev figures)",
    )
    parser.add_argument(
        "--distractors",
        default="",
        help="comma-separated N: also measure each conversation mixed with N other turns of "
        "its audience (bench/locomo_distractors.py), e.g. 0,10000,100000",
    )
    parser.add_argument("--api-key", default=None, help="for an endpoint embedder")
    parser.add_argument("--base-url", default=None, help="for an endpoint embedder")
    args = parser.parse_args(argv)
    if resolve_choice(args.embedder) in LOCAL_CHOICES:
        require_embeddings("locomo")
    local_or_none = (*LOCAL_CHOICES, "none")
    if args.embedder and args.embedder.lower() not in local_or_none and args.api_key is None:
        import os

        args.api_key = os.environ.get("OPENAI_API_KEY")
        args.base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    _sizes(args.distractors)  # a bad list is refused before anything is replayed
    result = asyncio.run(run(args))
    print(f"LoCoMo retrieval — {result['data']} — embedder {result['embedder']}")
    print(f"questions (categories 1-4): {result['questions']}")
    print(f"speed reference (bench.speed, lower is faster): {result['speed_reference_ms']} ms")
    print(f"turn-level evidence recall: {_at(result['recall_at'])}")
    for name, cat in result["per_category"].items():
        print(f"  {name:<12} ({cat['questions']:>3} q): {_at(cat['recall_at'])}")
    q = result["query_ms"]
    print(f"query latency (incl. question embedding): p50 {q['p50']} ms, p95 {q['p95']} ms")
    print(
        f"questions with no result (below the relevance threshold): {result['no_result_questions']}"
    )
    print("precision (a turn shows the top " + f"{MAX_RESULTS} recalled blocks):")
    _print_precision(result["precision"])
    before = result["before_noise_gate"]
    print(f"before issue 25 (its noise gate and second hop): recall {_at(before['recall_at'])}")
    _print_precision(before)
    cv = result.get("cross_validated")
    if cv is not None:
        print(f"k-fold (leave one conversation out, {cv['settings']} settings, chosen per fold):")
        for fold in cv["folds"]:
            print(
                f"  held out conversation {fold['held_out']}: recall {_at(fold['recall_at'])}, "
                f"foreign {fold['foreign_recalled'] * 100:.1f}%, "
                f"tuning {fold['tuning'] or 'shipped'}"
            )
        held = cv["held_out"]
        print(f"  held-out folds pooled: recall {_at(held['recall_at'])}")
        for name, at in held["per_category"].items():
            print(f"    {name:<12}: {_at(at)}")
        _print_precision(held)
    ing = result["ingest"]
    print(f"ingest: {ing['turns']} turns in {ing['seconds']} s ({ing['turns_per_s']} turns/s)")
    print(f"peak memory: {result['peak_rss_mb']} MB")
    found = figures(result)
    print_figures("locomo", found)
    write_json(Path(args.json) if args.json else None, "locomo", found, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
