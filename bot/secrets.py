"""Secrets at rest: tool-pack secrets and Slack installation documents sealed with BOT_SECRET_KEY.

`BOT_SECRET_KEY` is either a Fernet key (urlsafe base64 of 32 bytes, e.g. from
`Fernet.generate_key()`) or any passphrase of at least 16 characters, from which the Fernet key is
derived with HKDF-SHA256 (no salt, info `HKDF_INFO`, 32 bytes; fixed, so one passphrase always
gives the same key; surrounding whitespace is ignored). Sealed values are
`"enc:v1:<fernet token>"` (AES-128-CBC + HMAC-SHA256); any other value is returned unchanged by
`open`, so data stored before a key was set keeps working. Neither the key nor a plain value ever
appears in an error message.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

if TYPE_CHECKING:
    from bot.config import Settings

PREFIX = "enc:v1:"
HKDF_INFO = b"chatbot BOT_SECRET_KEY v1"
MIN_PASSPHRASE = 16


class SecretsUnavailable(Exception):
    """A sealed value cannot be opened: BOT_SECRET_KEY is unset or is not the key it was sealed
    with (or the value is damaged). The message names the variable, never a value."""


def fernet_key(secret: str) -> bytes:
    """The Fernet key for a BOT_SECRET_KEY value; ValueError (naming no value) if unusable."""
    secret = secret.strip()
    try:
        raw = base64.urlsafe_b64decode(secret.encode("ascii"))
    except (UnicodeEncodeError, binascii.Error, ValueError):
        raw = b""
    if len(raw) == 32 and base64.urlsafe_b64encode(raw).decode("ascii") == secret:
        return secret.encode("ascii")
    if len(secret) < MIN_PASSPHRASE:
        raise ValueError(
            "must be a Fernet key (urlsafe base64 of 32 bytes) "
            f"or a passphrase of at least {MIN_PASSPHRASE} characters"
        )
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=HKDF_INFO).derive(
        secret.encode("utf-8")
    )
    return base64.urlsafe_b64encode(derived)


def is_sealed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


class SecretBox:
    """Seals and opens strings with one key."""

    def __init__(self, secret: str) -> None:
        self._fernet = Fernet(fernet_key(secret))

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretBox | None:
        """The box for BOT_SECRET_KEY, or None when it is not set."""
        key = settings.bot_secret_key
        if key is None or not key.get_secret_value().strip():
            return None
        return cls(key.get_secret_value())

    def __repr__(self) -> str:
        return "SecretBox(<key hidden>)"

    def seal(self, plain: str) -> str:
        return PREFIX + self._fernet.encrypt(plain.encode("utf-8")).decode("ascii")

    def open(self, value: str) -> str:
        """The plain value of a sealed one; any other value unchanged."""
        if not is_sealed(value):
            return value
        try:
            return self._fernet.decrypt(value[len(PREFIX) :].encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError, ValueError):
            raise SecretsUnavailable(
                "a stored secret cannot be decrypted with this BOT_SECRET_KEY "
                "(it was sealed with another key, or it is damaged)"
            ) from None


def open_value(box: SecretBox | None, value: str) -> str:
    """`box.open(value)`, also for no box: then a sealed value raises SecretsUnavailable."""
    if box is not None:
        return box.open(value)
    if is_sealed(value):
        raise SecretsUnavailable(
            "a stored secret is encrypted but BOT_SECRET_KEY is not set: "
            "set it to the key it was sealed with"
        )
    return value
