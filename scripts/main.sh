#!/usr/bin/env bash
# The main job: build every registered mixer and run it on random data (until `tokenmix compare` lands).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh data,plot
exec "${TOKENMIX_VENV:-.venv}/bin/tokenmix" demo "$@"
