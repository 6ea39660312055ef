"""Durable stores and caches behind small protocols (see `bot.stores.protocols`)."""
