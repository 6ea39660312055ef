"""Find the shared data sets (`shared/data`: retail orders, LoCoMo) that tests and benches read.

The data is never copied into the repo; it sits beside it. Where to look, in order:

1. `BOT_SHARED_DATA`, when set: that folder only (an explicit setting that points at the wrong
   place is reported, not silently replaced by another copy);
2. `../shared/data` from the project root (the documented layout);
3. `shared/data` under each further parent of the project root (a clone one level deeper).

No pytest here (the benches import it too): tests call `tests.support.shared_data.shared_data_file`,
which skips or fails when the file is missing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV = "BOT_SHARED_DATA"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Lookup:
    """Where a shared file was found (`path`, or None) and every place that was tried."""

    relative: str
    path: Path | None
    tried: tuple[Path, ...]
    via_env: bool

    def missing_message(self) -> str:
        places = ", ".join(str(p) for p in self.tried)
        how = (
            f"{ENV} is set, so only there"
            if self.via_env
            else f"set {ENV} to the folder that holds it"
        )
        return f"shared data file {self.relative} not found; looked in: {places} ({how})"


def candidate_dirs(root: Path, env: Mapping[str, str]) -> tuple[tuple[Path, ...], bool]:
    """The folders that may hold the shared data, in order, and whether the env var chose."""
    explicit = env.get(ENV)
    if explicit:
        return (Path(explicit).expanduser(),), True
    return tuple(parent / "shared" / "data" for parent in root.parents), False


def find_shared_data(
    relative: str, *, root: Path = PROJECT_ROOT, env: Mapping[str, str] | None = None
) -> Lookup:
    """Look `relative` (e.g. "retail/orders.json") up in the candidate folders; no side effects."""
    dirs, via_env = candidate_dirs(root, os.environ if env is None else env)
    for folder in dirs:
        path = folder / relative
        if path.is_file():
            return Lookup(relative, path, dirs, via_env)
    return Lookup(relative, None, dirs, via_env)
