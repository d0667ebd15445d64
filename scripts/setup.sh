#!/usr/bin/env bash
# Creates .venv (if missing) and installs tokenmix -- the core (the repository root) and the lab (lab/) -- into it,
# with the lab's extras named in $1 (e.g. "test"). On this kind of machine `pip install torch==2.13.0` takes a
# local CPU build in seconds; elsewhere any torch >= 2.2 will do, so fall back to the package's own range.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TOKENMIX_VENV:-.venv}"
extras="${1:-}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  "$venv/bin/pip" install -q torch==2.13.0 || "$venv/bin/pip" install -q "torch>=2.2"
fi
lab="./lab"
[ -n "$extras" ] && lab="./lab[$extras]"
"$venv/bin/pip" install -q -e . -e "$lab"
