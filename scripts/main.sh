#!/usr/bin/env bash
# The main job: `tokenmix compare` on the default experiment, experiments/mqar.toml (multi-query associative recall, no
# download), two runs at a time on 2 CPU cores; results in runs/mqar/. Extra arguments go to
# `tokenmix compare` (e.g. --jobs 1, --set train.max_steps=300).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh data,plot
exec "${TOKENMIX_VENV:-.venv}/bin/tokenmix" compare --config experiments/mqar.toml --jobs 2 "$@"
