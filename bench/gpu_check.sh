#!/usr/bin/env bash
# Kernel-tier check for a machine with one NVIDIA GPU, torch and Triton, no vLLM, no network.
#
# Runs, within about 7 minutes: which backends run; backend conformance against the float64
# reference; the regression corpus replayed from the precomputed sim-tier schedule
# (bench/kernel_schedule.json, made here by `python -m workers.kernels schedule`), which must
# diverge exactly where the sim tier saw a bad resume or a poisoned slot; and the throughput
# benchmark. Results go to $OUT (or --out DIR, default ./gpu_check_out): one .txt per stage, the
# JSON tables, and summary.txt. Exit 0 when every stage passed.
#
#   bench/gpu_check.sh [--backend triton|triton-interpret|torch|auto] [--out DIR] [--limit N]
#                      [--bench-limit N] [--python PY]
#   (--limit: replay only the first N schedule entries; --bench-limit: the same for the benchmark)
#   bench/gpu_check.sh --fetch-wheels    # on a networked machine: fla-core, einops and pydantic into bench/wheels
#
# Without vLLM the triton backend uses the fla-core package, and the readers need pydantic: when
# `import fla` or `import pydantic` fails, the wheels in bench/wheels are installed into a scratch
# directory (fla-core and einops pure Python, about 1.2 MB; pydantic's compiled core for CPython
# 3.10-3.13 on x86-64 Linux, about 2.3 MB each). A replay stage passes only with its table printed:
# its exit code 1 (divergences found) is also what a failure to start gives.
#
# --backend triton-interpret rehearses the check on a CPU machine with vLLM and Triton (no GPU):
# the same stages on the same FLA Triton kernels, run by Triton's interpreter (vLLM's copy), on
# fewer inputs since the interpreter is slow: 2 conformance cases, the replay of the schedule's
# pr51113-concurrent-prefills and internal-checkpoint-midblock-resume-mtp entries (the production
# trigger, and vLLM's internal-checkpoint bug with Mamba2's export kernel), the benchmark on one
# entry with the interpreter's cost per kernel. Stages that run only there: `interpreter` (which
# of vLLM's Triton kernels run under the interpreter, and which workaround each needs), and
# `fla-core`, `fla-core-replay` (the triton backend's own calls into fla-core, the GPU machine's
# path without vLLM, from bench/wheels: one conformance case, one replayed entry).
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
    --fetch-wheels)
      "$py" -m pip download fla-core==0.6.0 einops pydantic==2.14.4 annotated-types typing-extensions \
        typing-inspection --no-deps --only-binary=:all: -d "$wheels" || exit 1
      for v in 3.10 3.11 3.12 3.13; do
        "$py" -m pip download pydantic-core==2.50.5 --no-deps --only-binary=:all: --python-version "$v" \
          --platform manylinux2014_x86_64 -d "$wheels" || exit 1
      done
      exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out_dir"
summary="$out_dir/summary.txt"
: > "$summary"
export PYTHONUNBUFFERED=1

# Per backend: conformance cases, the replay's entries, and each stage's time limit (seconds).
cases=12
select=()
t_conformance=100 t_replay=200 t_throughput=100
if [ "$backend" = triton-interpret ]; then
  cases=2
  [ "$limit" = 0 ] && select=(--match pr51113-concurrent-prefills --match internal-checkpoint-midblock-resume-mtp)
  [ "$bench_limit" = 0 ] && bench_limit=1
  t_conformance=600 t_replay=900 t_throughput=600
fi

needs_fla_core=0
if [ "$backend" = triton ] && ! "$py" -c "import vllm.third_party.flash_linear_attention.ops" 2>/dev/null; then
  needs_fla_core=1
fi
[ "$backend" = triton-interpret ] && needs_fla_core=1
# What a machine without vLLM lacks, from bench/wheels: fla-core (the triton backend's kernels) and pydantic
# (the scenario and schedule readers; its compiled core for CPython 3.10-3.13 on x86-64 Linux).
wanted=()
if [ $needs_fla_core = 1 ] && ! "$py" -c "import fla.ops.gated_delta_rule" 2>/dev/null; then
  wanted+=(fla-core einops)
fi
if ! "$py" -c "import pydantic" 2>/dev/null; then
  wanted+=(pydantic pydantic-core annotated-types typing-extensions typing-inspection)
fi
if [ ${#wanted[@]} -gt 0 ]; then
  if ls "$wheels"/*.whl >/dev/null 2>&1; then
    pylib=$(mktemp -d)
    "$py" -m pip install --quiet --no-index --no-deps --find-links "$wheels" --target "$pylib" "${wanted[@]}" \
      || echo "could not install ${wanted[*]} from $wheels" | tee -a "$summary"
    export PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "no ${wanted[*]}: run bench/gpu_check.sh --fetch-wheels on a networked machine first" | tee -a "$summary"
  fi
fi

failed=0
stage() {  # stage NAME EXPECTED_RC TIMEOUT_S CMD...  ($must_print: a line the output must also hold)
  local name=$1 want=$2 limit_s=$3 start rc
  shift 3
  start=$(date +%s)
  timeout "$limit_s" "$@" > "$out_dir/$name.txt" 2>&1
  rc=$?
  grep -v "Triton is installed\|UserWarning\|_cpu_device_warning" "$out_dir/$name.txt" | tail -n 40
  if [[ " $want " == *" $rc "* ]] && { [ -z "${must_print:-}" ] || grep -q "$must_print" "$out_dir/$name.txt"; }; then
    echo "PASS $name (rc $rc, $(( $(date +%s) - start )) s)" | tee -a "$summary"
  else
    echo "FAIL $name (rc $rc, wanted $want, $(( $(date +%s) - start )) s)" | tee -a "$summary"
    failed=1
  fi
}

started=$(date +%s)
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee -a "$summary"
stage backends 0 60 "$py" -m workers.kernels backends
if [ "$backend" = triton-interpret ]; then
  stage interpreter 0 300 "$py" -m workers.kernels interpreter
fi
stage conformance 0 "$t_conformance" "$py" -m workers.kernels conformance --backend "$backend" --cases "$cases"
# rc 1: the corpus has pre-51113 divergences, and they agree with the sim tier (rc 3 would not)
must_print="^kernel tier, backend" stage replay 1 "$t_replay" "$py" -m workers.kernels replay --schedule bench/kernel_schedule.json \
  --backend "$backend" --out "$out_dir" --limit "$limit" ${select[@]+"${select[@]}"}
stage throughput 0 "$t_throughput" "$py" bench/kernel_throughput.py --backends "$backend" --limit "$bench_limit" \
  --out "$out_dir"
if [ "$backend" = triton-interpret ]; then  # the GPU machine's path without vLLM: fla-core, as the triton backend calls it
  stage fla-core 0 600 "$py" -m workers.kernels conformance --backend triton-interpret-fla --cases 1
  must_print="^kernel tier, backend" stage fla-core-replay 1 600 "$py" -m workers.kernels replay --schedule bench/kernel_schedule.json \
    --backend triton-interpret-fla --match pr51113-concurrent-prefills --limit 1
fi
echo "backend $backend: $([ $failed = 0 ] && echo all stages passed || echo some stage FAILED)" \
  "in $(( $(date +%s) - started )) s" | tee -a "$summary"
exit $failed
