#!/usr/bin/env bash
# The main job: `tokenmix compare` on its embedded default (generated ListOps, a few minutes on 2 CPU
# cores, no download); results in runs/compare/. Extra arguments go to `tokenmix compare`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh data,plot
exec "${TOKENMIX_VENV:-.venv}/bin/tokenmix" compare "$@"
