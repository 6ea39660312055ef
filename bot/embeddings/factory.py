"""`BOT_EMBEDDING_MODEL`: `local` (the optional extra), `none` (lexical only), or a model name at
the endpoint's `/embeddings`. Unset means `local` when the extra is installed, else `none`.

`local` runs the local model's default variant (bot/embeddings/local.py); `local-qint8` and
`local-fp32` pick one (each has its own vector name, so switching re-embeds)."""

from __future__ import annotations

from pathlib import Path

from bot.embeddings import local
from bot.embeddings.base import Embedder
from bot.embeddings.endpoint import EndpointEmbedder

LOCAL_CHOICES: dict[str, local.Variant] = {
    "local": local.DEFAULT_VARIANT,
    "local-qint8": "qint8",
    "local-fp32": "fp32",
}


class EmbedderConfigError(ValueError):
    """One line naming BOT_EMBEDDING_MODEL."""


def resolve_choice(setting: str | None) -> str:
    """The effective choice: "local", "local-qint8", "local-fp32", "none" or an endpoint model."""
    value = (setting or "").strip()
    if not value:
        return "local" if local.available() else "none"
    lowered = value.lower()
    return lowered if lowered in (*LOCAL_CHOICES, "none") else value


def open_embedder(
    setting: str | None,
    *,
    api_key: str | None,
    base_url: str | None,
    data_dir: Path | None = None,
) -> Embedder | None:
    """None for lexical-only retrieval. `data_dir` (BOT_DATA_DIR) can hold the local model's
    int8 file when the package's directory is read-only."""
    choice = resolve_choice(setting)
    if choice == "none":
        return None
    if choice in LOCAL_CHOICES:
        try:
            return local.LocalEmbedder(variant=LOCAL_CHOICES[choice], data_dir=data_dir)
        except local.LocalUnavailable as exc:
            raise EmbedderConfigError(f"BOT_EMBEDDING_MODEL={choice}: {exc}") from None
    if not api_key:
        raise EmbedderConfigError(
            f"BOT_EMBEDDING_MODEL={choice} needs OPENAI_API_KEY for the /embeddings endpoint"
        )
    return EndpointEmbedder(choice, api_key=api_key, base_url=base_url)
