"""`bot.secrets`: sealing, opening, key derivation, and BOT_SECRET_KEY validation."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from bot.config import ConfigError, Settings, load_settings
from bot.doctor import run_checks
from bot.secrets import PREFIX, SecretBox, SecretsUnavailable, fernet_key, open_value

PASSPHRASE = "correct horse battery staple"


def test_seal_and_open_round_trip_with_prefix() -> None:
    box = SecretBox(Fernet.generate_key().decode())
    sealed = box.seal("s3cr3t ✓")
    assert sealed.startswith(PREFIX) and sealed.startswith("enc:v1:")
    assert "s3cr3t" not in sealed
    assert box.open(sealed) == "s3cr3t ✓"
    assert box.seal("s3cr3t ✓") != sealed  # a fresh IV each time
    assert box.open(box.seal("")) == ""


def test_plain_values_pass_through() -> None:
    box = SecretBox(PASSPHRASE)
    for value in ("xoxb-plain", "", "enc:v2:later", "ENC:V1:upper"):
        assert box.open(value) == value
        assert open_value(None, value) == value
        assert open_value(box, value) == value


def test_wrong_key_or_no_key_raises_secrets_unavailable_naming_the_variable() -> None:
    sealed = SecretBox(PASSPHRASE).seal("s3cr3t")
    other = SecretBox(Fernet.generate_key().decode())
    for box in (other, None):
        with pytest.raises(SecretsUnavailable) as info:
            open_value(box, sealed)
        message = str(info.value)
        assert "BOT_SECRET_KEY" in message and "s3cr3t" not in message
        assert PASSPHRASE not in message and sealed not in message and "\n" not in message
    with pytest.raises(SecretsUnavailable):
        SecretBox(PASSPHRASE).open(PREFIX + "not-a-token")


def test_passphrase_derivation_is_stable_and_fernet_keys_are_used_as_is() -> None:
    # Pinned: HKDF-SHA256, no salt, info b"chatbot BOT_SECRET_KEY v1", 32 bytes. Changing any of
    # it would make every value sealed under a passphrase unreadable.
    assert fernet_key(PASSPHRASE) == b"j0EImT-bxLGiGmgrq09wfAESzJwpJd_eLlCr3OaZLmM="
    assert fernet_key(f"  {PASSPHRASE}\n") == fernet_key(PASSPHRASE)
    assert SecretBox(PASSPHRASE).open(SecretBox(PASSPHRASE).seal("x")) == "x"
    assert fernet_key("a" * 16) != fernet_key("a" * 17)
    key = Fernet.generate_key()
    assert fernet_key(key.decode()) == key
    assert Fernet(key).decrypt(SecretBox(key.decode()).seal("y")[len(PREFIX) :]) == b"y"
    for bad in ("", "short", "x" * 15, base64.urlsafe_b64encode(b"k" * 8).decode()):
        with pytest.raises(ValueError, match="16 characters"):
            fernet_key(bad)


def test_box_repr_hides_the_key() -> None:
    assert PASSPHRASE not in repr(SecretBox(PASSPHRASE))


def test_settings_validate_bot_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_SECRET_KEY", "tooshort1")
    with pytest.raises(ConfigError, match=r"^BOT_SECRET_KEY is invalid") as info:
        load_settings(_env_file=None)
    assert "tooshort1" not in str(info.value) and "\n" not in str(info.value)

    monkeypatch.setenv("BOT_SECRET_KEY", "  ")
    settings = load_settings(_env_file=None)
    assert settings.bot_secret_key is None and SecretBox.from_settings(settings) is None

    monkeypatch.setenv("BOT_SECRET_KEY", PASSPHRASE)
    settings = load_settings(_env_file=None)
    box = SecretBox.from_settings(settings)
    assert box is not None and SecretBox(PASSPHRASE).open(box.seal("z")) == "z"
    assert PASSPHRASE not in repr(settings)


@pytest.mark.parametrize("key", [None, PASSPHRASE])
async def test_doctor_says_whether_secrets_are_encrypted(
    key: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(_env_file=None, bot_data_dir=tmp_path, bot_secret_key=key)  # type: ignore[call-arg, arg-type]
    assert await run_checks(settings) is False  # no OPENAI_API_KEY here
    lines = [line for line in capsys.readouterr().out.splitlines() if " secrets: " in line]
    if key is None:
        assert lines == [
            "info secrets: stored unencrypted "
            "(set BOT_SECRET_KEY to encrypt tool and platform tokens at rest)"
        ]
    else:
        assert lines == ["ok   secrets: encrypted at rest (BOT_SECRET_KEY set)"]
