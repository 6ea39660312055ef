"""The `mcp` tool pack: a team's own MCP server, its tools offered in that team only.

`/tools install mcp name=<pack name> url=<streamable HTTP endpoint> [token=<bearer token>]
[allow=<tool,tool,...>]`. Several servers per team, each under its own name; tools are offered as
`<name>_<server's tool name>`. The server's input schema is the tool's schema and is enforced
before the call; a tool the server marks read-only (`readOnlyHint`) may be retried after a
transient failure, anything else is a write (never retried after an unknown outcome, idempotent
per session and arguments, like every write tool). A result the server flags as an error is a
business error the model can act on; so is a structured result that breaks the output schema
the server declared for the tool (`tools.mcp.output`). Descriptions reach the model quoted as
the server's text (`SERVER_TEXT`), not as the bot's instructions.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Annotated, Any, Literal

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from tools.declare import Tool
from tools.errors import ToolBusinessError
from tools.mcp.connection import McpConnection, ServerDown
from tools.mcp.naming import PACK_NAME_RE, namespace
from tools.mcp.output import SCHEMA_META, OutputCheck, output_checker
from tools.mcp.render import render_result
from tools.mcp.schema import MAX_DESCRIPTION_CHARS, BadSchema, checker, model_schema
from tools.packs.base import PackEnv, PackUnavailable, ToolPack
from tools.types import ToolContext

log = logging.getLogger("tools.mcp")
CAP_GRACE = 5.0  # seconds the executor's timer leaves the connection's own cut

SERVER_TEXT = "Description from MCP server {pack}: “{text}”"
"""How a tool's description reaches the model: quoted and attributed to the server, so the
model reads it as the server's words about the tool, not as the bot's instructions (about eight
tokens per tool; a note per turn would have to sit after the person's message)."""


class McpConfig(BaseModel):
    """Install settings of one MCP server."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: Annotated[
        str,
        Field(description="Pack name: lower-case letters, digits and '-', up to 24 characters."),
    ]
    url: Annotated[str, Field(description="The server's streamable HTTP endpoint.")]
    token: Annotated[
        SecretStr | None, Field(description="Bearer token, if the server needs one.")
    ] = None
    allow: Annotated[
        str | None, Field(description="Only these tools (comma-separated server tool names).")
    ] = None
    auth: Annotated[
        Literal["team", "user"],
        Field(description="user: each person signs in with their own account (OAuth)."),
    ] = "team"
    client_id: Annotated[
        str | None, Field(description="auth=user: a client registered at the provider.")
    ] = None
    client_secret: Annotated[
        SecretStr | None, Field(description="auth=user: that client's secret, if it has one.")
    ] = None
    scopes: Annotated[
        str | None, Field(description="auth=user: the scopes to ask for (space-separated).")
    ] = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        value = value.strip()
        if not PACK_NAME_RE.match(value):
            raise ValueError(
                "must start with a letter and use only lower-case letters, digits and '-' "
                "(up to 24 characters)"
            )
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL")
        if parts.username or parts.password:
            raise ValueError("must not carry credentials (use token=...)")
        return value

    @field_validator("token")
    @classmethod
    def _blank_is_none(cls, value: SecretStr | None) -> SecretStr | None:
        return value if value is not None and value.get_secret_value().strip() else None

    @field_validator("allow")
    @classmethod
    def _allow(cls, value: str | None) -> str | None:
        names = sorted({n.strip() for n in (value or "").split(",") if n.strip()})
        return ",".join(names) or None

    @model_validator(mode="after")
    def _user_auth(self) -> McpConfig:
        if self.auth == "user" and self.token is not None:
            raise ValueError("auth=user servers take no token: each person signs in")
        if self.auth != "user" and (self.client_id or self.client_secret or self.scopes):
            raise ValueError("client_id, client_secret and scopes go with auth=user")
        if self.client_secret is not None and not self.client_id:
            raise ValueError("client_secret needs client_id")
        return self

    @property
    def allowed(self) -> frozenset[str] | None:
        return frozenset(self.allow.split(",")) if self.allow else None


class McpArguments(BaseModel):
    """Arguments already checked against the server's schema; passed through as given."""

    model_config = ConfigDict(extra="allow")


def _caller(conn: McpConnection, server_name: str, check_output: OutputCheck | None) -> Any:
    async def call(args: McpArguments, ctx: ToolContext) -> Any:
        result = await conn.call(server_name, args.model_dump())
        if result.is_error:
            text = render_result(result.content, None).get("text") or "The tool reported an error."
            raise ToolBusinessError(str(text)[:1000])
        if check_output is not None:
            await check_output(result.structured_content, result.meta)
        return render_result(result.content, result.structured_content)

    return call


def adapt(
    pack: str, listing: list[types.Tool], conn: McpConnection, allow: frozenset[str] | None
) -> list[Tool]:
    """Tools for the model from the server's listing (bad schemas skipped with a warning)."""
    wanted = [t for t in listing if allow is None or t.name in allow]
    by_name = {t.name: t for t in wanted}
    out: list[Tool] = []
    for mapped, server_name in namespace(pack, list(by_name)).items():
        spec = by_name[server_name]
        try:
            params = model_schema(spec.input_schema)
            check_output = output_checker((spec.meta or {}).get(SCHEMA_META))
        except BadSchema as exc:
            log.warning(
                "mcp_tool_skipped",
                extra={"fields": {"pack": pack, "tool": server_name[:64], "reason": str(exc)}},
            )
            continue
        desc = (spec.description or spec.title or server_name).strip()[:MAX_DESCRIPTION_CHARS]
        desc = SERVER_TEXT.format(pack=pack, text=desc)
        read_only = bool(spec.annotations is not None and spec.annotations.read_only_hint)
        schema = {
            "type": "function",
            "function": {"name": mapped, "description": desc, "parameters": params},
        }
        out.append(
            Tool(
                name=mapped,
                description=desc,
                fn=_caller(conn, server_name, check_output),
                args_model=McpArguments,
                write=not read_only,
                # The connection cuts idle and over-long calls itself (progress extends the idle
                # deadline up to the cap): the executor's own timer only backs that up.
                timeout=max(conn.call_cap, conn.call_timeout) + CAP_GRACE,
                model_arg="args",
                context_arg="ctx",
                schema_json=json.dumps(schema, ensure_ascii=False, separators=(",", ":")),
                check_args=checker(params),
            )
        )
    return out


async def _load(config: McpConfig, env: PackEnv, install: str) -> list[Tool]:
    if config.auth == "user":  # built per person by the toolbox (bot.connections)
        raise PackUnavailable("each person connects this server with their own account")
    if env.mcp is None:
        raise PackUnavailable("MCP servers are not available in this bot")
    token = config.token.get_secret_value() if config.token is not None else None
    conn = env.mcp.connection(install, config.url, token)
    try:
        listing = await conn.tools()
    except ServerDown as exc:
        raise PackUnavailable(str(exc)) from None
    key = (conn.version, config.name, config.allow)
    cached = conn.adapted
    if isinstance(cached, tuple) and cached[0] == key:
        tools: list[Tool] = cached[1]
        return tools
    # Checking up to 128 server schemas is pure-Python work: in a thread, off the event loop.
    tools = await asyncio.to_thread(adapt, config.name, listing, conn, config.allowed)
    conn.adapted = (key, tools)
    return tools


def _no_sync_build(config: McpConfig, env: PackEnv) -> list[Tool]:
    raise PackUnavailable("the mcp pack's tools are listed from its server (use build_async)")


MCP_PACK = ToolPack(
    name="mcp",
    description="Your team's own MCP server (streamable HTTP): its tools, under the name you give.",
    config_model=McpConfig,
    builder=_no_sync_build,
    tool_names=(),
    secret_keys=frozenset({"token", "client_secret"}),
    loader=_load,
    named_by="name",
)
