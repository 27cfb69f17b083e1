# Sourced by the gen scripts: run from the repo root with the project venv.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
source "$ROOT/.venv/bin/activate"
LOGS="tests/data/logs"
GEN="tests/data/gen"
# capture LOGFILE CMD...: echo the command the way a terminal shows it, then
# run it with stdout+stderr merged into the log (also shown on the console).
capture() {
  local log="$1"; shift
  mkdir -p "$(dirname "$log")"
  { echo "\$ $*"; bash -c "$*" 2>&1; } > "$log"
  echo "wrote $log ($(wc -l < "$log") lines)"
}
# capture_append LOGFILE CMD...: same, appended to an existing log
capture_append() {
  local log="$1"; shift
  { echo "\$ $*"; bash -c "$*" 2>&1; } >> "$log"
}
source "$ROOT/$GEN/_logdir.sh"
# capture_until PATTERN TRIES LOGFILE CMD...: for races: re-run CMD (at most TRIES times) until the
# log shows PATTERN (grep -E); the last run's output is kept.
capture_until() {
  local pat="$1" tries="$2" log="$3"; shift 3
  local i
  for i in $(seq 1 "$tries"); do
    capture "$log" "$@"
    grep -qE "$pat" "$log" && return 0
    echo "  (attempt $i did not show /$pat/, re-running)"
  done
}
