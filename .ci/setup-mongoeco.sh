#!/usr/bin/env bash
# Create .ci-venv/mongoeco: a Python 3.13 venv with mongoeco's wire server, the in-memory
# MongoDB-protocol server the mongo store tests run against (no MongoDB on CI machines).
# Idempotent: does nothing when the pinned version is already installed.
set -euo pipefail

MONGOECO_VERSION="4.11.0"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.ci-venv/mongoeco"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$MONGOECO_VERSION" <<'PY' 2>/dev/null; then
import sys
import mongoeco
import mongoeco.wire  # noqa: F401  (the [wire] extra is importable)
sys.exit(0 if mongoeco.__version__ == sys.argv[1] else 1)
PY
    echo "setup-mongoeco: mongoeco $MONGOECO_VERSION already installed in $VENV"
    exit 0
fi

BASE_PYTHON="${MONGOECO_BASE_PYTHON:-}"
if [ -z "$BASE_PYTHON" ]; then
    if ! command -v pyenv >/dev/null 2>&1; then
        echo "setup-mongoeco: pyenv not found; install pyenv with a Python 3.13 or set MONGOECO_BASE_PYTHON" >&2
        exit 1
    fi
    for candidate in "$(pyenv root)"/versions/3.13.*/bin/python3; do
        if [ -x "$candidate" ]; then
            BASE_PYTHON="$candidate"
        fi
    done
fi
if [ -z "$BASE_PYTHON" ] || [ ! -x "$BASE_PYTHON" ]; then
    echo "setup-mongoeco: no Python 3.13 under $(pyenv root 2>/dev/null || echo '<pyenv root>')/versions (run: pyenv install 3.13)" >&2
    exit 1
fi

echo "setup-mongoeco: creating $VENV with $BASE_PYTHON"
rm -rf "$VENV"
"$BASE_PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mongoeco[wire]==$MONGOECO_VERSION"
echo "setup-mongoeco: installed mongoeco $MONGOECO_VERSION in $VENV"
