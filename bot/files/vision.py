"""Whether images go to the model as image parts (`BOT_VISION=auto|on|off`).

`auto` decides from the model name: names of known text-only models get a note instead of the
image; every other name is tried with image parts, and when the server rejects them the turn
falls back to text (see `bot.turn`) and this process stops offering images to that model.
`on` always sends them (still falling back, so a turn is never lost); `off` never does.
"""

from __future__ import annotations

import re
from typing import Literal

VisionMode = Literal["auto", "on", "off"]

_TEXT_ONLY = re.compile(
    r"^(gpt-3\.5|gpt-4(-\d{4})?$|gpt-4-32k|gpt-4-0613|o1-mini|o3-mini|davinci|babbage"
    r"|text-|llama-?[23](\.[01])?\b(?!.*vision)|mistral(?!.*pixtral)|mixtral|codellama"
    r"|deepseek-(coder|r1|chat)|qwen2?(\.5)?-(?!.*vl)|phi-?[23](?!.*vision))",
    re.IGNORECASE,
)


class Vision:
    """The vision decision for one model, remembering a server's refusal of image parts."""

    def __init__(self, mode: VisionMode, model: str) -> None:
        self.mode = mode
        self.model = model
        self._refused = False

    @property
    def enabled(self) -> bool:
        if self.mode == "off":
            return False
        if self.mode == "on":
            return True
        return not self._refused and not _TEXT_ONLY.search(self.model.rsplit("/", 1)[-1])

    def refused(self) -> None:
        """The server rejected image parts: `auto` stops sending them in this process."""
        self._refused = True
