"""A third-party tool pack: what a team ships with `pip install` next to the bot.

It depends on the tool engine only (`tools.*`), registers under the `chatbot.tool_packs`
entry-point group in its own pyproject.toml, and takes one setting (`prefix`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tools.declare import Injected, Tool, tool
from tools.packs.base import PackEnv, ToolPack


class EchoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefix: Annotated[str, Field(description="Text put before every echo.", max_length=20)] = ""


@tool
async def echo_text(
    text: Annotated[str, Field(description="What to say back.", max_length=500)],
    *,
    prefix: Injected[str],
) -> dict[str, str]:
    """Say the given text back, unchanged. Use it when the user asks for an echo."""
    return {"echo": prefix + text}


def _build(config: EchoConfig, env: PackEnv) -> list[Tool]:
    return [echo_text.bind(prefix=config.prefix)]


ECHO_PACK = ToolPack(
    name="echo",
    description="Echoes text back (a pack installed from its own distribution).",
    config_model=EchoConfig,
    builder=_build,
    tool_names=(echo_text.name,),
)
