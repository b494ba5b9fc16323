#!/usr/bin/env bash
# Kernel-tier check for a machine with one NVIDIA GPU, torch and Triton, no vLLM, no network.
#
# Runs, within about 7 minutes: which backends run; backend conformance against the float64
# reference; the regression corpus replayed from the precomputed sim-tier schedule
# (bench/kernel_schedule.json, made here by `python -m workers.kernels schedule`), which must
# diverge exactly where the sim tier saw a bad resume; and the throughput benchmark.
# Results go to $OUT (or --out DIR, default ./gpu_check_out): one .txt per stage, the JSON
# tables, and summary.txt. Exit 0 when every stage passed.
#
#   bench/gpu_check.sh [--backend triton|torch|auto] [--out DIR] [--limit N] [--bench-limit N] [--python PY]
#   (--limit: replay only the first N schedule entries; --bench-limit: the same for the benchmark)
#   bench/gpu_check.sh --fetch-wheels    # on a networked machine: fla-core + einops into bench/wheels
#
# Without vLLM the triton backend uses the fla-core package: when `import fla` fails, the
# wheels in bench/wheels (pure Python, about 1.2 MB) are installed into a scratch directory.
set -uo pipefail
cd "$(dirname "$0")/.."

backend=triton
out_dir=${OUT:-gpu_check_out}
limit=0
bench_limit=0
py=${PYTHON:-python3}
wheels=bench/wheels
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend=$2; shift 2 ;;
    --out) out_dir=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --bench-limit) bench_limit=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --fetch-wheels) exec "$py" -m pip download fla-core==0.6.0 einops --no-deps -d "$wheels" ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out_dir"
summary="$out_dir/summary.txt"
: > "$summary"
export PYTHONUNBUFFERED=1

if [ "$backend" = triton ] && ! "$py" -c "import fla.ops.gated_delta_rule" 2>/dev/null \
    && ! "$py" -c "import vllm.third_party.flash_linear_attention.ops" 2>/dev/null; then
  if ls "$wheels"/*.whl >/dev/null 2>&1; then
    pylib=$(mktemp -d)
    "$py" -m pip install --quiet --no-index --no-deps --target "$pylib" "$wheels"/*.whl
    export PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "no fla-core: run bench/gpu_check.sh --fetch-wheels on a networked machine first" | tee -a "$summary"
  fi
fi

failed=0
stage() {  # stage NAME EXPECTED_RC TIMEOUT_S CMD...
  local name=$1 want=$2 limit_s=$3 start rc
  shift 3
  start=$(date +%s)
  timeout "$limit_s" "$@" > "$out_dir/$name.txt" 2>&1
  rc=$?
  grep -v "Triton is installed" "$out_dir/$name.txt" | tail -n 40
  if [[ " $want " == *" $rc "* ]]; then
    echo "PASS $name (rc $rc, $(( $(date +%s) - start )) s)" | tee -a "$summary"
  else
    echo "FAIL $name (rc $rc, wanted $want, $(( $(date +%s) - start )) s)" | tee -a "$summary"
    failed=1
  fi
}

"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee -a "$summary"
stage backends 0 60 "$py" -m workers.kernels backends
stage conformance 0 100 "$py" -m workers.kernels conformance --backend "$backend" --cases 12
# rc 1: the corpus has pre-51113 divergences, and they agree with the sim tier (rc 3 would not)
stage replay 1 200 "$py" -m workers.kernels replay --schedule bench/kernel_schedule.json \
  --backend "$backend" --out "$out_dir" --limit "$limit"
stage throughput 0 100 "$py" bench/kernel_throughput.py --backends "$backend" --limit "$bench_limit" \
  --out "$out_dir"
echo "backend $backend: $([ $failed = 0 ] && echo all stages passed || echo some stage FAILED)" | tee -a "$summary"
exit $failed
