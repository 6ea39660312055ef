"""The bot-pair budget: five answers to the same bot in a place per window, then quiet."""

from __future__ import annotations

from bot.bot_pairs import BotPairBudget
from bot.keys import TeamKey
from bot.stores.memory_cache import MemoryCache

TEAM = TeamKey("slack", "T1")


async def test_five_answers_then_cooldown_until_the_window_ends() -> None:
    now = [0.0]
    budget = BotPairBudget(MemoryCache(clock=lambda: now[0]))
    admitted = [await budget.admit(TEAM, "C1", "B2") for _ in range(7)]
    assert admitted == [True] * 5 + [False] * 2
    assert await budget.admit(TEAM, "C2", "B2")  # another place has its own budget
    assert await budget.admit(TEAM, "C1", "B3")  # and another bot
    now[0] = 601.0
    assert await budget.admit(TEAM, "C1", "B2")
