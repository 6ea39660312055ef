"""Bits both cache implementations share, so they behave identically."""

from __future__ import annotations

import secrets


def ttl_ms(ttl: float) -> int:
    """A TTL in whole milliseconds; a non-positive TTL is a caller bug (it would never expire)."""
    if ttl <= 0:
        raise ValueError(f"ttl must be positive, got {ttl!r}")
    return max(1, round(ttl * 1000))


def lock_token() -> str:
    """Identifies one holder, so a holder whose lock expired cannot release the next one's."""
    return secrets.token_hex(16)
