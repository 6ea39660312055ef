"""The event loop the bot's long-running processes run on: uvloop where installed, else asyncio's.

uvloop (libuv underneath) runs the same coroutines with less CPU per callback, socket write and
thread hand-off, which is most of what a Slack turn's event loop does: `bench/bench_slack.py`,
back to back on one machine, measured 7.8 against 8.4 ms of bot CPU per answered mention. It is
a dependency except on Windows (no wheels); where it cannot be imported, `auto` runs asyncio's
loop without a word. `BOT_EVENT_LOOP=asyncio` opts out (a debugger or profiler that wants
asyncio's own frames); `uvloop` insists and fails when missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")
Choice = Literal["auto", "uvloop", "asyncio"]


class EventLoopUnavailable(Exception):
    """BOT_EVENT_LOOP=uvloop on a machine without uvloop."""


def loop_factory(choice: Choice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for `asyncio.Runner` (None: asyncio's default loop)."""
    if choice == "asyncio":
        return None
    if importlib.util.find_spec("uvloop") is None:
        if choice == "uvloop":
            raise EventLoopUnavailable("BOT_EVENT_LOOP=uvloop, but uvloop is not installed")
        return None
    import uvloop

    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: Choice = "auto") -> T:
    """`asyncio.run` on the chosen loop."""
    try:
        factory = loop_factory(choice)
    except EventLoopUnavailable:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def running_loop_name() -> str:
    """`uvloop` or `asyncio`, for the platforms' start-up log lines."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
