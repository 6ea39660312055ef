"""How much of each model request repeats the previous request's prefix (what providers' prompt
caches reuse), with and without episodic recall.

A real `bot.app.BotApp` (SQLite store, in-process cache, BOT_CONTEXT_TOKENS=8000) answers a
long conversation: the turns of a LoCoMo conversation (`--data`, first conversation), said by
its two speakers in one channel, one bot turn per message, with a model that answers at once
with a reply of a usual length (summaries included, so the rolling summary folds as it does in
production). With episodic
memory on, memories recalled for each message sit after the history, next to the message.

For each chat request: the tokens of its leading messages identical to the previous request's
(the system prompt, memory note and history stay put between summary folds), over all its input
tokens. Printed: that share over the whole conversation, and the recalls made.

The target (issue 9): with recall, the share stays at 85 % or more.

Run: python -m bench.bench_prompt_cache --data ../shared/data/locomo/locomo_dev.json
     [--turns 300] [--embedder none|local] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.needs import require_embeddings
from bench.report import add_json_option, at_least, info, print_figures, write_json
from bot.app import BotApp
from bot.config import Settings
from bot.embeddings.factory import LOCAL_CHOICES, resolve_choice
from bot.memory.episodic.service import HEADER, open_episodic
from bot.messages import IncomingMessage
from bot.model import ModelResponse
from bot.stores.memory_cache import MemoryCache
from bot.stores.sqlite import SqliteStore
from bot.tokens import TokenCounter
from testkit.sinks import CollectingSink

MODEL = "gpt-4o-mini"
TARGET = 85.0  # % of input tokens repeating the previous request's prefix, with recall
# A reply of a usual length for a chat assistant (about 80 tokens), quoting the message.
REPLY = (
    'Thanks for sharing that. You said: "{said}". That sounds like it matters to you, and '
    "I'll keep it in mind. If you'd like, I can help you plan the next steps, suggest a few "
    "ideas, or just listen; tell me which would help most right now."
)


class RecordingModel:
    """Answers at once; keeps every chat request's messages."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_delta: Any = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tool_choice: str | None = None,
        model: str | None = None,
    ) -> ModelResponse:
        if response_format is not None:
            body = " ".join(str(m.get("content", "")) for m in messages[1:])[-1200:]
            summary = json.dumps({"summary": body, "key_facts": []})
            return ModelResponse(content=summary, finish_reason="stop", model=MODEL)
        self.requests.append([dict(m) for m in messages])
        said = str(messages[-1].get("content", ""))
        return ModelResponse(content=REPLY.format(said=said), finish_reason="stop", model=MODEL)

    async def close(self) -> None:
        return None


def prefix_share(requests: list[list[dict[str, Any]]], counter: TokenCounter) -> float:
    repeated = total = 0
    previous: list[str] = []
    for messages in requests:
        keys = [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in messages]
        sizes = [counter.message(m) for m in messages]
        total += sum(sizes)
        for i, key in enumerate(keys):
            if i >= len(previous) or previous[i] != key:
                break
            repeated += sizes[i]
        previous = keys
    return repeated / total if total else 0.0


async def run(turns: list[tuple[str, str]], *, episodic: bool, embedder: str) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="cachebench-") as tmp:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            openai_api_key="x",
            bot_model=MODEL,
            bot_data_dir=Path(tmp),
            bot_context_tokens=8000,
        )
        store = await SqliteStore.open(Path(tmp) / "bot.db")
        counter = TokenCounter(MODEL)
        memory = None
        if episodic:
            memory = await open_episodic(
                store,
                data_dir=Path(tmp),
                counter=counter,
                embedding_model=embedder,
                api_key=None,
                base_url=None,
            )
        model = RecordingModel()
        app = BotApp(settings, store=store, cache=MemoryCache(), model=model, episodic=memory)
        try:
            for user, text in turns:
                message = IncomingMessage(
                    platform="bench", team="T", channel="C", thread=None, user=user, text=text
                )
                await app.handle_message(message, CollectingSink())
                await app.drain(within=30)
                if memory is not None:
                    await memory.idle(30)
            recalls = sum(
                1 for r in model.requests if any(HEADER in str(m.get("content")) for m in r)
            )
            return prefix_share(model.requests, counter), recalls
        finally:
            await app.close()


def load_turns(path: str, limit: int) -> list[tuple[str, str]]:
    sample = json.loads(Path(path).read_text(encoding="utf-8"))[0]
    conv = sample["conversation"]
    out: list[tuple[str, str]] = []
    n = 1
    while f"session_{n}" in conv and len(out) < limit:
        for turn in conv[f"session_{n}"]:
            user = "".join(c for c in str(turn["speaker"]) if c.isalnum()) or "someone"
            if turn.get("text"):
                out.append((user, str(turn["text"])))
        n += 1
    return out[:limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_prompt_cache")
    parser.add_argument("--data", required=True)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--embedder", default="none")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if resolve_choice(args.embedder) in LOCAL_CHOICES:
        require_embeddings("bench_prompt_cache")
    turns = load_turns(args.data, args.turns)
    base, _ = asyncio.run(run(turns, episodic=False, embedder="none"))
    share, recalls = asyncio.run(run(turns, episodic=True, embedder=args.embedder))
    print(f"{len(turns)} turns, BOT_CONTEXT_TOKENS=8000")
    print(f"prefix repeated from the previous request, without episodic memory: {base:.1%}")
    print(
        f"prefix repeated from the previous request, with episodic memory ({args.embedder}): "
        f"{share:.1%} ({recalls} requests carried recalled memories)"
    )
    recall = "lexical" if args.embedder == "none" else args.embedder
    found = [
        info("prompt prefix share, without recall", round(base * 100, 1), "%"),
        at_least(
            f"prompt prefix share, with recall ({recall})",
            round(share * 100, 1),
            TARGET,
            "%",
        ),
        info("requests that carried recalled memories", f"{recalls} of {len(turns)}"),
    ]
    print_figures("prompt_cache", found)
    detail = {"turns": len(turns), "without": base, "with": share, "recalls": recalls}
    write_json(args.json, "prompt_cache", found, detail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
