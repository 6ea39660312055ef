"""`bench.locomo --distractors N` (issue 25): each conversation's place holds N copies of other
conversations' turns, speakers renamed and dates shifted, written through the real write path;
run here end to end (lexical only, real SQLite) on a small file in LoCoMo's format."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bench import locomo
from bench.locomo_distractors import distractor_threads, source_sessions


def _sample(sample_id: str, a: str, b: str, topic: str) -> dict[str, Any]:
    sessions: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    for n, date in ((1, "1:56 pm on 8 May, 2023"), (2, "10:37 am on 27 June, 2023")):
        sessions[f"session_{n}_date_time"] = date
        sessions[f"session_{n}"] = [
            {"speaker": a, "dia_id": f"D{n}:1", "text": f"Hi {b}, the {topic} went well today"},
            {"speaker": b, "dia_id": f"D{n}:2", "text": f"Glad to hear it, {a}!"},
            {"speaker": a, "dia_id": f"D{n}:3", "text": f"Next time bring the {topic} notes"},
        ]
    return {
        "sample_id": sample_id,
        "conversation": sessions,
        "qa": [
            {"question": f"How did {a}'s {topic} go?", "category": 4, "evidence": ["D1:1"]},
            {"question": f"What should {b} bring?", "category": 4, "evidence": ["D1:3"]},
        ],
    }


DATA = [
    _sample("conv-a", "Caroline", "Melanie", "pottery class"),
    _sample("conv-b", "Jon", "Gina", "dance studio"),
]


def test_copies_rename_everyone_shift_by_weeks_and_stop_at_n() -> None:
    others = source_sessions(DATA[1], locomo.parse_date, locomo._turn_text)
    taken = {"Caroline", "Melanie", "Jon", "Gina"}
    threads = list(distractor_threads(others, 20, taken))
    assert sum(len(turns) for _, _, turns in threads) == 20
    assert len({thread for thread, _, _ in threads}) == len(threads)
    originals = {s.number: s.when for s in others}
    for thread, when, turns in threads:
        number = int(thread.rsplit("-s", 1)[1])
        assert (when - originals[number]) % timedelta(weeks=1) == timedelta(0)
        assert abs(when - originals[number]) <= timedelta(weeks=52)
        for speaker, text in turns:
            assert speaker not in taken
            assert not any(name in text for name in taken), text
    assert threads == list(distractor_threads(others, 20, taken))  # deterministic


def test_the_bench_reports_recall_and_latency_with_distractors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps(DATA), encoding="utf-8")
    out = tmp_path / "result.json"
    args = ["--data", str(data), "--embedder", "none", "--no-folds", "--json", str(out)]
    assert locomo.main([*args, "--distractors", "0,25"]) == 0
    rows = json.loads(out.read_text())["distractors"]
    turns = 6  # each conversation's own
    assert [(r["backend"], r["distractors"], r["entries_per_place"]) for r in rows] == [
        ("sqlite", 0, turns),
        ("sqlite", 25, 25 + turns),
    ]
    for row in rows:
        assert 0.0 <= row["recall_at"]["10"] <= 1.0 and row["query_ms"]["p95"] > 0
    assert rows[0]["recall_at"]["10"] == 1.0  # two turns to find among six
    assert "with 25 distractor turns (sqlite, 31 entries a place)" in capsys.readouterr().out


def test_a_distractor_count_out_of_range_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="within 0"):
        locomo.main(["--data", str(tmp_path / "unread.json"), "--distractors", "-5"])


def test_with_a_mongodb_uri_it_measures_mongodb_too(
    tmp_path: Path, mongoeco_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BENCH_MONGODB_URI (mongoeco here) adds MongoDB rows: the same recall as SQLite, since
    the same turns go through the same write and retrieval paths."""
    monkeypatch.setenv("BENCH_MONGODB_URI", mongoeco_uri)
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps(DATA), encoding="utf-8")
    out = tmp_path / "result.json"
    args = ["--data", str(data), "--embedder", "none", "--no-folds", "--json", str(out)]
    assert locomo.main([*args, "--distractors", "12"]) == 0
    rows = json.loads(out.read_text())["distractors"]
    assert [(r["backend"], r["entries_per_place"]) for r in rows] == [
        ("sqlite", 18),
        ("mongodb", 18),
    ]
    assert rows[0]["recall_at"] == rows[1]["recall_at"]
