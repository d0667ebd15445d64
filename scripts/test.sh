#!/usr/bin/env bash
# The test suite (the default excludes tests marked slow; pass -m slow to run those).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,data,plot,report,hf
exec "${TOKENMIX_VENV:-.venv}/bin/python" -m pytest -q "$@"
