#!/usr/bin/env bash
# The test suite (the default excludes tests marked slow; pass -m slow to run those): first the core alone in a
# venv without the lab (scripts/test_core.sh), then everything with the core and the lab installed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test_core.sh
bash scripts/setup.sh test,data,plot,report,hf
exec "${TOKENMIX_VENV:-.venv}/bin/python" -m pytest -q "$@"
