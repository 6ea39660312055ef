"""`BOT_EMBEDDING_MODEL`: `local` (the optional extra), `none` (lexical only), or a model name at
the endpoint's `/embeddings`. Unset means `local` when the extra is installed, else `none`."""

from __future__ import annotations

from bot.embeddings import local
from bot.embeddings.base import Embedder
from bot.embeddings.endpoint import EndpointEmbedder


class EmbedderConfigError(ValueError):
    """One line naming BOT_EMBEDDING_MODEL."""


def resolve_choice(setting: str | None) -> str:
    """The effective choice: "local", "none" or an endpoint model name."""
    value = (setting or "").strip()
    if not value:
        return "local" if local.available() else "none"
    return value.lower() if value.lower() in ("local", "none") else value


def open_embedder(
    setting: str | None, *, api_key: str | None, base_url: str | None
) -> Embedder | None:
    """None for lexical-only retrieval."""
    choice = resolve_choice(setting)
    if choice == "none":
        return None
    if choice == "local":
        try:
            return local.LocalEmbedder()
        except local.LocalUnavailable as exc:
            raise EmbedderConfigError(f"BOT_EMBEDDING_MODEL=local: {exc}") from None
    if not api_key:
        raise EmbedderConfigError(
            f"BOT_EMBEDDING_MODEL={choice} needs OPENAI_API_KEY for the /embeddings endpoint"
        )
    return EndpointEmbedder(choice, api_key=api_key, base_url=base_url)
