#!/usr/bin/env bash
# The recorder, the fits and Table 1 on a GPU, printing the same rows as the CPU benchmarks, then each case's
# GPU seconds beside the CPU seconds in benchmarks/results/.
#
#   pip install -e ".[gpu]"                  # jax with CUDA 12 (several GB of wheels), on the GPU machine
#   benchmarks/bench_gpu.sh [OUT_DIR]        # default benchmarks/results/gpu; SIMULATIONS=100 for a shorter Table 1
#
# Without a GPU it says so and runs nothing (exit status 3); BENCH_ON_CPU=1 runs the same rows on the CPU anyway
# (a dry run of the script). Nothing here needs a GPU to build or test: the CPU benchmarks are the scripts it calls.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then PY=${PYTHON:-.venv/bin/python}; else PY=${PYTHON:-python3}; fi
OUT=${1:-benchmarks/results/gpu}
SIMULATIONS=${SIMULATIONS:-500}

backend=$("$PY" -c "import jax; print(jax.default_backend())" 2>/dev/null)
if [ "$backend" != "gpu" ] && [ "${BENCH_ON_CPU:-0}" != "1" ]; then
    echo "no GPU: jax's backend is '$backend'. On a machine with an NVIDIA GPU run pip install -e '.[gpu]' first;"
    echo "BENCH_ON_CPU=1 $0 runs the same rows on the CPU."
    exit 3
fi
mkdir -p "$OUT"
"$PY" -c "import jax; print('devices:', jax.devices())"

"$PY" benchmarks/bench_dpvi.py --cases m1,linreg-10d,adult,m1x500 --out "$OUT/bench_dpvi.json"
"$PY" benchmarks/bench_fit.py --cases m1-exact,linreg-exact,linreg-nuts-blackjax,m1x500-exact,linregx500-exact,adult-exact \
    --repeats 3 --out "$OUT/bench_fit.json"
start=$SECONDS
"$PY" benchmarks/coverage.py --simulations "$SIMULATIONS" --out "$OUT/table1.json"
echo "Table 1 ($SIMULATIONS simulations per cell): $((SECONDS - start)) s wall"
"$PY" benchmarks/compare_devices.py "$OUT"
