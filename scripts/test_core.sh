#!/usr/bin/env bash
# The core alone: a venv (.venv-core) holding the core with its hf and test extras and nothing of the lab, and
# the core's tests (tests/core) run in it. scripts/test.sh calls it first.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TOKENMIX_CORE_VENV:-.venv-core}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  "$venv/bin/pip" install -q torch==2.13.0 || "$venv/bin/pip" install -q "torch>=2.2"
fi
"$venv/bin/pip" install -q ".[hf,test]"
"$venv/bin/pip" install -q --force-reinstall --no-deps .  # today's core, not an earlier install of the same version
rm -rf build
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/core
