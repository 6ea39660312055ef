#!/usr/bin/env bash
# The lowest declared versions, tried once per CI run (called by .ci/run; alone after that:
# `bash .ci/lowest.sh`). A fresh venv .ci-venv/lowest gets every direct dependency at the floor
# pyproject.toml declares (uv's `--resolution lowest-direct`: direct requirements at their lowest,
# what they pull in at the newest that fits, as a user who pins our floors would get), on the
# lowest Python the project supports. Then every module under bot/, tools/, adapters/ must import,
# and a cross-section of the suite must pass on it. A floor the code outgrew fails here instead of
# on a user's machine: raise it in pyproject.toml, saying why.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MAIN="$ROOT/.ci-venv/main"
LOWEST="$ROOT/.ci-venv/lowest"
UV_VERSION="0.13.9"

# uv keeps its cache inside the checkout (nothing is left elsewhere), never fetches a Python.
export UV_CACHE_DIR="$ROOT/.ci-venv/uv-cache" UV_PYTHON_DOWNLOADS=never
"$MAIN/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
UV="$MAIN/bin/uv"

PYTHON="$(command -v python3.11 || true)"
if [ -z "$PYTHON" ]; then
    PYTHON="$(command -v python3)"
    echo "lowest: no python3.11 (requires-python's floor); using $("$PYTHON" --version)"
fi
rm -rf "$LOWEST" # always fresh: a venv left by an earlier run keeps versions lowest-direct would not pick
"$UV" venv --quiet --python "$PYTHON" "$LOWEST"
"$UV" pip install --quiet --python "$LOWEST/bin/python" --resolution lowest-direct \
    -e ".[test]" -e tests/packs/echo_pack

"$LOWEST/bin/python" - <<'PY'
"""One line: the version of each direct dependency this venv got."""
import platform
import re
import tomllib
from importlib.metadata import version

with open("pyproject.toml", "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
names = [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in deps]
got = " ".join(f"{n}=={version(n)}" for n in names)
print(f"lowest on Python {platform.python_version()}: {got}")
PY

"$LOWEST/bin/python" .ci/import_all.py bot tools adapters
# The platforms' event loop at its floor (tests/uvloop needs pytest-asyncio's newer loop hook).
"$LOWEST/bin/python" -c 'from bot import eventloop
async def name(): return eventloop.running_loop_name()
assert eventloop.run(name(), "uvloop") == "uvloop"'

# A cross-section that exercises each dependency through its real use (about 2 minutes on a loaded
# 2-core machine; the whole suite on this venv passed too, in 16): the turn, model client and
# token counting (openai, pydantic, tiktoken), stores (SQLite, pymongo on mongoeco, redis-py),
# tools, MCP and entry-point packs (httpx, jsonschema, mcp), memory (numpy, PyStemmer,
# APScheduler), files (pillow), Slack (slack_bolt, slack_sdk, aiohttp), Discord (discord.py), and
# the CLI and start-up (pydantic-settings).
TESTS=(
    tests/core/test_turn.py
    tests/core/test_commands.py
    tests/core/test_tokens.py
    tests/core/test_cli_help.py
    tests/model/test_model_client.py
    tests/stores/test_store_contract.py
    tests/stores/test_mongo_store.py
    tests/stores/test_cache_contract.py
    tests/stores/test_cache_failover.py
    tests/tools/test_tool_executor.py
    tests/tools/test_orders_pack.py
    tests/tools/test_netguard.py
    tests/tools/test_mcp_packs.py
    tests/tools/test_entry_point_packs.py
    tests/memory/test_episodic.py
    tests/memory/test_consolidation.py
    tests/files/test_file_units.py
    tests/slack/test_events_e2e.py
    tests/slack/test_replies.py
    tests/slack/test_commands_e2e.py
    tests/slack/test_oauth_e2e.py
    tests/slack/test_socket_mode.py
    tests/slack/test_real_core_e2e.py
    tests/slack/test_files_e2e.py
    tests/discord/test_conversation.py
    tests/discord/test_startup.py
    tests/e2e/test_platform_cli.py
)
"$LOWEST/bin/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}"
