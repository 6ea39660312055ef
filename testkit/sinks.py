"""A ReplySink that keeps what it is given: tests and benches read a turn's reply from it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CollectingSink:
    """A ReplySink that keeps everything it is given (tests and benchmarks read it)."""

    deltas: list[str] = field(default_factory=list)
    final: str | None = None
    error: bool = False
    working_calls: int = 0

    async def working(self) -> None:
        self.working_calls += 1

    async def delta(self, text: str) -> None:
        self.deltas.append(text)

    async def finish(self, text: str, *, error: bool = False) -> None:
        self.final = text
        self.error = error
