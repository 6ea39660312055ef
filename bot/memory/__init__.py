"""Memory tiers: working memory (this turn), session memory (recent + summary + pinned facts),
long-term facts per person. See `context.py` for how they fit into one token budget."""
