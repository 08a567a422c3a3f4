#!/bin/bash
# The README's quick start, timed phase by phase in a fresh clone, idle and beside a busy process.
#   bash benchmarks/quickstart_time.sh [OUT.json]
# Each phase runs exactly as the README's first command does; the busy case runs a pure-Python
# spin loop on one core throughout (a second process competing for the two cores).
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
out=${1:-$repo/benchmarks/results/quickstart_time.json}
phases() {  # $1: a fresh clone; prints {"setup_s", "heuristic_s", "report_s"}
  cd "$1"
  local s p h r
  s=$(date +%s.%N)
  python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e . > pip.log 2>&1
  p=$(date +%s.%N)
  .venv/bin/esper heuristic --run-dir runs/quickstart > run.log 2>&1
  h=$(date +%s.%N)
  .venv/bin/esper report runs/quickstart > report.log 2>&1
  r=$(date +%s.%N)
  printf '{"setup_s": %.1f, "heuristic_s": %.1f, "report_s": %.1f}' \
    "$(echo "$p - $s" | bc)" "$(echo "$h - $p" | bc)" "$(echo "$r - $h" | bc)"
}
work=$(mktemp -d)
git clone -q "$repo" "$work/idle" && idle=$(phases "$work/idle")
# the torch build and its CPU kernels: a figure from an AVX2 machine is not one from an AVX512 machine
kernels=$("$work/idle/.venv/bin/python" -c \
  'import torch; print(f"\"torch\": \"{torch.__version__}\", \"cpu_capability\": \"{torch.backends.cpu.get_cpu_capability()}\"")')
git clone -q "$repo" "$work/busy"
python3 -c "while True: pass" & spin=$!
busy=$(phases "$work/busy")
kill "$spin"
printf '{"date": "%s", "commit": "%s", "machine": "%s, %s CPUs", %s, "idle": %s, "beside_a_busy_process": %s}\n' \
  "$(date -u +%Y-%m-%d)" "$(git -C "$repo" rev-parse --short HEAD)" "$(uname -m)" "$(nproc)" "$kernels" "$idle" "$busy" \
  | tee "$out"
rm -rf "$work"
