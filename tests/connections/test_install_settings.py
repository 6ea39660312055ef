"""What an admin can type for a per-person server, and BOT_PUBLIC_URL: bad values get a clear
answer naming the setting, never an echo of a secret."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.config import Settings
from tools.mcp.pack import MCP_PACK
from tools.packs import PackConfigError

URL = "https://crm.example.test/mcp"


def test_auth_user_settings() -> None:
    cfg = MCP_PACK.load_config({"name": "crm", "url": URL, "auth": "user"})
    assert cfg.auth == "user" and cfg.token is None
    pre = MCP_PACK.load_config(
        {"name": "crm", "url": URL, "auth": "user", "client_id": "abc", "client_secret": "s3cr3t"}
    )
    assert "s3cr3t" not in str(MCP_PACK.redacted(pre))
    assert MCP_PACK.secret_keys >= {"token", "client_secret"}
    refused = [
        ({"auth": "user", "token": "t0k3n-value"}, "take no token"),
        ({"client_id": "abc"}, "go with auth=user"),
        ({"auth": "user", "client_secret": "s3cr3t"}, "needs client_id"),
        ({"auth": "everyone"}, "auth"),
    ]
    for extra, why in refused:
        with pytest.raises(PackConfigError) as err:
            MCP_PACK.load_config({"name": "crm", "url": URL, **extra})
        assert why in str(err.value)
        assert "t0k3n-value" not in str(err.value) and "s3cr3t" not in str(err.value)


def test_public_url() -> None:
    def settings(value: str) -> Settings:
        return Settings(_env_file=None, openai_api_key="k", bot_public_url=value)  # type: ignore[call-arg]

    assert settings("https://bot.example.test/").bot_public_url == "https://bot.example.test"
    assert settings("  ").bot_public_url is None
    for bad in ("bot.example.test", "ftp://x.test", "https://x.test/?a=1", "https://u:p@x.test"):
        with pytest.raises(ValidationError, match="bot_public_url"):
            settings(bad)
