"""The shared-data lookup the data tests use: where it looks, and skip vs fail when missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.shared_data import ENV, find_shared_data
from tests.support.shared_data import shared_data_file

ORDERS = "retail/orders.json"


def layout(base: Path, data_at: Path | None) -> Path:
    """A project root three levels under `base`; the data file (if any) under `data_at`."""
    root = base / "ci" / "builds" / "chatbot"
    root.mkdir(parents=True)
    if data_at is not None:
        (data_at / "retail").mkdir(parents=True)
        (data_at / ORDERS).write_text("{}")
    return root


def test_next_to_the_project_root(tmp_path: Path) -> None:
    root = layout(tmp_path, tmp_path / "ci" / "builds" / "shared" / "data")
    found = find_shared_data(ORDERS, root=root, env={})
    assert found.path == tmp_path / "ci" / "builds" / "shared" / "data" / ORDERS
    assert found.tried[0] == root.parent / "shared" / "data"  # ../shared/data comes first


def test_found_further_up_the_parents(tmp_path: Path) -> None:
    root = layout(tmp_path, tmp_path / "shared" / "data")
    found = find_shared_data(ORDERS, root=root, env={})
    assert found.path == tmp_path / "shared" / "data" / ORDERS
    assert found.tried[:3] == tuple(root.parents[i] / "shared" / "data" for i in range(3))


def test_the_nearest_copy_wins(tmp_path: Path) -> None:
    root = layout(tmp_path, tmp_path / "shared" / "data")
    near = root.parent / "shared" / "data"
    (near / "retail").mkdir(parents=True)
    (near / ORDERS).write_text("{}")
    assert find_shared_data(ORDERS, root=root, env={}).path == near / ORDERS


def test_the_variable_is_the_only_place_looked_when_set(tmp_path: Path) -> None:
    root = layout(tmp_path, tmp_path / "shared" / "data")  # a copy up the tree, not used
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "retail").mkdir(parents=True)
    (elsewhere / ORDERS).write_text("{}")
    assert find_shared_data(ORDERS, root=root, env={ENV: str(elsewhere)}).path == (
        elsewhere / ORDERS
    )
    wrong = find_shared_data(ORDERS, root=root, env={ENV: str(tmp_path / "typo")})
    assert wrong.path is None and wrong.tried == (tmp_path / "typo",)
    assert f"{ENV} is set, so only there" in wrong.missing_message()


def test_missing_fails_under_ci_naming_what_and_where(tmp_path: Path) -> None:
    root = layout(tmp_path, None)
    with pytest.raises(pytest.fail.Exception) as failed:
        shared_data_file(ORDERS, root=root, env={"CI": "true"})
    message = str(failed.value)
    assert ORDERS in message and "required because CI is set" in message
    assert str(root.parent / "shared" / "data") in message  # where it looked
    assert str(tmp_path / "shared" / "data") in message
    assert ENV in message  # how to point it elsewhere


@pytest.mark.parametrize("env", [{}, {"CI": "false"}, {"CI": "0"}, {"CI": ""}])
def test_missing_skips_without_ci(tmp_path: Path, env: dict[str, str]) -> None:
    root = layout(tmp_path, None)
    with pytest.raises(pytest.skip.Exception) as skipped:
        shared_data_file(ORDERS, root=root, env=env)
    assert ORDERS in str(skipped.value) and str(root.parent / "shared" / "data") in str(
        skipped.value
    )


def test_this_checkout_finds_the_real_data() -> None:
    """Where the data is present (CI), the tests that need it get a real file."""
    path = shared_data_file(ORDERS)
    assert path.is_file() and path.stat().st_size > 1000
