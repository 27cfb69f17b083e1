# Sourced: copy a torchrun --log-dir tree into tests/data/logs/<ID>/<name>/rank<N>.log
# usage: collect_logdir TMPDIR DESTDIR  (uses stderr.log of each local rank, attempt_N subdirs kept as attemptN-)
collect_logdir() {
  local src="$1" dest="$2"
  mkdir -p "$dest"
  local attempt_dirs
  attempt_dirs=$(find "$src" -mindepth 2 -maxdepth 2 -type d -name 'attempt_*' | sort)
  local n
  n=$(echo "$attempt_dirs" | wc -l)
  for a in $attempt_dirs; do
    local prefix=""
    [ "$n" -gt 1 ] && prefix="$(basename "$a" | tr -d _)-"
    for r in "$a"/*/; do
      local lr
      lr=$(basename "$r")
      # per-rank file: stdout then stderr, as torchrun wrote them (the scripts log to one stream)
      cat "$r/stdout.log" "$r/stderr.log" > "$dest/${prefix}rank${lr}.log" 2>/dev/null
    done
  done
}
