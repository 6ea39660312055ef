"""Fixtures for the multi-process tests: `make_cluster` builds a `Cluster` on fresh fakes.

The processes' logs are attached to the report of a test that failed; every process is killed
at teardown, whatever happened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.fakes.openai_server import Brain, FakeOpenAI
from testkit.fakes.slack_api import FakeSlack
from tests.scale.cluster import Cluster

MakeCluster = Callable[..., Awaitable[Cluster]]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    clusters: list[Cluster] = getattr(item, "_scale_clusters", [])
    if report.failed and clusters:
        for n, cluster in enumerate(clusters):
            report.sections.append((f"bot processes (cluster {n})", cluster.logs()))


@pytest.fixture
async def make_cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MakeCluster]:
    """`await make_cluster("shared" | "embedded", brain=..., env={...})`. "shared" needs the
    mongoeco and Redis fixtures (skips without them outside CI, fails under CI)."""
    made: list[Cluster] = []
    fakes: list[Any] = []
    request.node._scale_clusters = made

    async def make(
        backend: str = "shared", *, brain: Brain, env: dict[str, str] | None = None
    ) -> Cluster:
        slack = await FakeSlack().start()
        fakes.append(slack)
        model = await FakeOpenAI(brain=brain).start()
        fakes.append(model)
        values: dict[str, Any] = {}
        if backend == "shared":
            values = {
                "mongo_uri": request.getfixturevalue("mongoeco_uri"),
                "redis_url": request.getfixturevalue("redis_url"),
                "redis_prefix": request.getfixturevalue("redis_prefix"),
            }
        workdir = tmp_path / f"cluster{len(made)}"
        workdir.mkdir()
        cluster = Cluster(workdir, slack, model, backend=backend, extra_env=env or {}, **values)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            await cluster.close()
        for fake in reversed(fakes):
            await fake.close()
