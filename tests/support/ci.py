"""One rule for a test whose real dependency (a server, a data file) is missing.

A developer's machine without it skips the test with the reason. Under CI (env `CI` set, as
`.ci/run` exports) the missing part is a broken setup, and a skip would let a run pass without
testing anything: the test fails with the reason instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NoReturn

import pytest


def under_ci(env: Mapping[str, str] | None = None) -> bool:
    """`CI` set to anything but an explicit no (`false`, `0`, `no`, empty)."""
    value = (os.environ if env is None else env).get("CI", "")
    return value.strip().lower() not in ("", "0", "false", "no")


def missing(reason: str, env: Mapping[str, str] | None = None) -> NoReturn:
    """Skip with `reason`, or fail with it when CI is set."""
    if under_ci(env):
        pytest.fail(f"{reason} (required because CI is set)", pytrace=False)
    pytest.skip(reason)
