# The GPU pilots of the 001-kerformer-lra files (their records: docs/reproduction/gpu/): softmax and the point-wise
# mlp on the four Long Range Arena tasks, the CPU pilot files (experiments/001-kerformer-lra-pilot-*.toml) at LRA's
# step counts (ListOps, Retrieval and Text 5,000 steps; Pathfinder 10,000, cut at 330 s each), all four side by side
# on one GPU. Run from the repository root; the Austen text and Pathfinder pictures come from the data cache
# ($TOKENMIX_DATA). Records go to $OUT/rec, the logs to $OUT.
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-runs/gpu-pilots}
mkdir -p "$OUT/rec"
nvidia-smi -L
run() {  # task, steps, eval_every, seconds
  timeout "$4" python3 -m tokenmix.cli compare --config "experiments/001-kerformer-lra-pilot-$1.toml" \
    --set "name=\"001-kerformer-lra-pilot-gpu-$1\"" --set 'train.device="cuda"' --set "train.max_steps=$2" \
    --set "train.eval_every=$3" --jobs 2 --out "runs/gpu-$1" --results "$OUT/rec" > "$OUT/log-$1.txt" 2>&1
  echo "$1 rc $?"
}
run listops 5000 250 330 & run retrieval 5000 250 330 & run text 5000 250 330 & run pathfinder 10000 500 330 &
wait
for f in runs/gpu-*/runs/*/seed0/log.csv; do  # validation accuracy every eval_every steps (a run cut short has no row)
  echo "== $f"; awk -F, 'NR > 1 {printf "%d:%.3f ", $1, $6} END {print ""}' "$f"
done
