#!/usr/bin/env bash
# One prepared pass on a GPU machine (see bench/gpu/README.md): record what the machine's own tools print,
# run `gpudoctor check` against a real GPU and NCCL, make each scenario of scenario.py fail for real under
# torchrun, and run the probe tests. Everything lands in $OUT (default ./gpu-out).
# Wheels for packages the machine lacks may sit in .whl/ (installed with --no-index into /tmp/site).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT" /tmp/gd/logs
PY=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . >"$OUT/install.txt" 2>&1 || cat "$OUT/install.txt"
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
gd() { timeout -k 5 "${GD_TIMEOUT:-180}" $PY -m gpudoctor "$@"; }

{
  date -u; uname -a; nvidia-smi; nvidia-smi -L
  echo "== topo -m"; nvidia-smi topo -m
  echo "== topo -p2p r"; nvidia-smi topo -p2p r
  echo "== query"; nvidia-smi --query-gpu=index,name,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure --format=csv
  echo "== nvlink"; nvidia-smi nvlink -s
  echo "== fabric"; nvidia-smi -q | sed -n '/Fabric/,/^$/p'
  echo "== systemctl"; systemctl is-active nvidia-fabricmanager 2>&1; ls /dev/shm -ld; df -h /dev/shm
  echo "== ip"; ip -o link 2>&1; ip -o addr 2>&1; ls /sys/class/infiniband 2>&1
  $PY -c "import torch,sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.get_device_name(0))"
} >"$OUT/facts.txt" 2>&1
nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1

echo "== check (default)"
GD_TIMEOUT=240 gd check --json >"$OUT/check.json" 2>"$OUT/check.err"; echo "rc=$?" >>"$OUT/check.err"


run() {  # name nproc timeout [env...]
  local name=$1 nproc=$2 limit=$3; shift 3
  echo "== scenario $name"
  env NCCL_DEBUG=INFO TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 \
      TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/tmp/gd/logs/$name-nccl_trace_rank_ "$@" \
    timeout -k 5 "$limit" $PY -m torch.distributed.run --nproc_per_node "$nproc" --master_port $((29600 + RANDOM % 300)) \
      bench/gpu/scenario.py "$name" >"/tmp/gd/logs/$name.log" 2>&1
  echo "$?" >"/tmp/gd/logs/$name.rc"
}
run clean 1 90
run all-on-gpu0 2 90
run global-ordinal 2 90
run bad-ifname 1 90 NCCL_SOCKET_IFNAME=nosuchif0
run no-ib 1 90 NCCL_NET=IB
run stuck-kernel 1 120 SCENARIO_PG_TIMEOUT=10
run crash-then-wait 2 90
run late-peer 2 50 SCENARIO_PG_TIMEOUT=15
run oom 1 90
tar -C /tmp/gd -czf "$OUT/logs.tar.gz" logs

echo "== probe tests"
timeout -k 5 240 $PY -m pytest -q -p no:cacheprovider tests/probes >"$OUT/pytest-probes.txt" 2>&1
echo "rc=$?" >>"$OUT/pytest-probes.txt"
tail -3 "$OUT/pytest-probes.txt"
ls -la "$OUT"
