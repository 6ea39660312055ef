"""Envelopes and trimming: always valid JSON, readable Chinese, structural cuts with counts."""

from __future__ import annotations

import json
import math

from tools import envelope


def test_dumps_is_compact_and_keeps_chinese() -> None:
    assert envelope.dumps(envelope.ok({"城市": "北京"})) == '{"ok":true,"data":{"城市":"北京"}}'


def test_lone_surrogates_fall_back_to_escapes() -> None:
    text = envelope.dumps({"x": "bad \ud800 text"})
    text.encode("utf-8")  # must not raise
    assert json.loads(text) == {"x": "bad \ud800 text"}


def test_jsonable_handles_nan_sets_and_objects() -> None:
    out = envelope.jsonable({"nan": math.nan, "inf": math.inf, "set": {1}, "obj": object()})
    assert out["nan"] is None and out["inf"] is None and out["set"] == [1]
    assert isinstance(out["obj"], str)
    assert envelope.jsonable(math.nan) is None
    assert envelope.jsonable("plain") == "plain"


def test_error_envelope_shape() -> None:
    env = envelope.error("bad_arguments", "fix it", retryable=True, fields={"a": "required"})
    assert env == {
        "ok": False,
        "error": {
            "type": "bad_arguments",
            "message": "fix it",
            "fields": {"a": "required"},
            "retryable": True,
        },
    }
    assert "fields" not in envelope.error("timeout", "later", retryable=True)["error"]


def test_small_results_are_untouched() -> None:
    content, size, trimmed = envelope.fit({"a": 1}, 100)
    assert (content, size, trimmed) == ('{"ok":true,"data":{"a":1}}', 26, False)


def test_long_lists_are_cut_with_a_count() -> None:
    data = {"orders": [{"id": i, "text": "x" * 50} for i in range(500)], "total": 500}
    content, size, trimmed = envelope.fit(data, 4000)
    assert trimmed and size > 4000 and len(content) <= 4000
    env = json.loads(content)
    assert env["ok"] is True and env["truncated"] is True and "trimmed" in env["note"]
    orders = env["data"]["orders"]
    assert orders[0] == {"id": 0, "text": "x" * 50}
    assert orders[-1].endswith("more items omitted")
    kept = len(orders) - 1
    assert orders[-1] == f"… {500 - kept} more items omitted"
    assert env["data"]["total"] == 500


def test_long_strings_are_shortened() -> None:
    content, _, trimmed = envelope.fit({"body": "字" * 10_000}, 1000)
    env = json.loads(content)
    assert trimmed and len(content) <= 1000
    assert env["data"]["body"].startswith("字字字") and "chars)" in env["data"]["body"]


def test_unstructurable_results_become_a_preview() -> None:
    deep: object = "leaf"
    for _ in range(60):
        deep = [deep, "y" * 100]
    content, _, trimmed = envelope.fit(deep, 300)
    env = json.loads(content)
    assert trimmed and len(content) <= 300 and env["truncated"] is True


def test_tiny_limits_still_give_valid_json() -> None:
    content, _, trimmed = envelope.fit(list(range(1000)), 10)
    assert trimmed and json.loads(content)["ok"] is True
