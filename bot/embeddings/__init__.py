"""Embeddings for long-term memory behind one protocol: the model endpoint's `/embeddings`, a
small local model (optional extra `embeddings`), or none (lexical retrieval only)."""
