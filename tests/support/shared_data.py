"""`shared_data_file`: a shared data file for a test (the lookup is `testkit.shared_data`).

When the file is missing the test skips on a developer's machine, but FAILS under CI (env `CI`
set, as `.ci/run` does): a CI run that silently skipped the orders tests would pass without
testing them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from testkit.shared_data import PROJECT_ROOT, find_shared_data
from tests.support.ci import missing


def shared_data_file(
    relative: str, *, root: Path = PROJECT_ROOT, env: Mapping[str, str] | None = None
) -> Path:
    """The path of a shared data file; skips the test when it is missing, fails under CI."""
    environ = os.environ if env is None else env
    found = find_shared_data(relative, root=root, env=environ)
    if found.path is not None:
        return found.path
    missing(found.missing_message(), environ)
