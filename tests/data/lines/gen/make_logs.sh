#!/usr/bin/env bash
# Regenerate the torchrun/gloo logs in tests/data/lines/ (CPU only, ~1.5 min).
# Run from anywhere: bash tests/data/lines/gen/make_logs.sh
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
source "$ROOT/.venv/bin/activate"
OUT="tests/data/lines"
GEN="tests/data/lines/gen"
run() {  # run LOG PORT ENV... -- ARGS...: torchrun 2 workers, stdout+stderr merged into LOG
  local log="$1" port="$2"; shift 2
  env "$@" torchrun --nproc-per-node 2 --master-port "$port" "${TORCHRUN_ARGS[@]}" "$SCRIPT" > "$OUT/$log" 2>&1
  echo "wrote $OUT/$log ($(wc -l < "$OUT/$log") lines)"
}
TORCHRUN_ARGS=(); SCRIPT="$GEN/gloo_timeout.py"
run torchrun_gloo_timeout.log 29631 GEN_TIMEOUT_S=2
run torchrun_gloo_peer_exit.log 29637 GEN_TIMEOUT_S=20 GEN_MODE=exit
run torchrun_gloo_detail.log 29636 GEN_TIMEOUT_S=2 TORCH_CPP_LOG_LEVEL=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL
TORCHRUN_ARGS=(--tee 3)
run torchrun_gloo_timeout_tee.log 29632 GEN_TIMEOUT_S=2
TORCHRUN_ARGS=(); SCRIPT="$GEN/rank1_raises.py"
run torchrun_rank1_raises.log 29633 GEN_MODE=raise
run torchrun_rank1_abort.log 29634 GEN_MODE=abort
run torchrun_rank1_exit.log 29635 GEN_MODE=exit
run torchrun_both_raise.log 29638 GEN_MODE=both
