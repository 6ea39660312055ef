"""`BOT_PRICES`: `model=INPUT/CACHED_INPUT/OUTPUT;...`, US dollars per million tokens.

Dollars per million tokens are micro-dollars per token, so a request's cost in micro-dollars is
its token counts times the prices; OpenAI counts cached prompt tokens inside the prompt tokens,
so the uncached part is prompt - cached. A model without a price is metered in tokens only
(its cost is None, shown as "no price").
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PRICES_CHARS = 10_000
MAX_PRICE = 10_000.0  # dollars per million tokens: anything above is a typo


@dataclass(frozen=True, slots=True)
class Price:
    input: float
    cached_input: float
    output: float


def parse_prices(text: str) -> dict[str, Price]:
    """ValueError naming the entry that is wrong (the setting is checked at start-up)."""
    if len(text) > MAX_PRICES_CHARS:
        raise ValueError(f"BOT_PRICES is longer than {MAX_PRICES_CHARS:,} characters")
    prices: dict[str, Price] = {}
    for entry in (e.strip() for e in text.split(";")):
        if not entry:
            continue
        model, sep, numbers = entry.partition("=")
        parts = numbers.split("/")
        if not sep or not model.strip() or len(parts) != 3:
            raise ValueError(
                f"BOT_PRICES entry {entry[:60]!r} is not model=INPUT/CACHED_INPUT/OUTPUT"
            )
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise ValueError(
                f"BOT_PRICES entry {entry[:60]!r} has a price that is not a number"
            ) from None
        if not all(0 <= v <= MAX_PRICE for v in values):
            raise ValueError(f"BOT_PRICES entry {entry[:60]!r}: prices are 0 to {MAX_PRICE:,.0f}")
        prices[model.strip()] = Price(*values)
    return prices


class Prices:
    def __init__(self, prices: dict[str, Price]) -> None:
        self.prices = prices

    @classmethod
    def parse(cls, text: str) -> Prices:
        return cls(parse_prices(text))

    def known(self, model: str) -> bool:
        return model in self.prices

    def cost(self, model: str, prompt: int, cached: int, completion: int) -> int | None:
        """Micro-dollars, or None for a model without a price."""
        price = self.prices.get(model)
        if price is None:
            return None
        cached = min(max(cached, 0), prompt)
        micros = (
            (prompt - cached) * price.input
            + cached * price.cached_input
            + completion * price.output
        )
        return round(micros)
