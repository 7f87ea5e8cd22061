#!/usr/bin/env bash
# Creates the other trainer's own virtualenv (TRL's GRPOTrainer), outside this project's environment:
# trl is never one of seal-platform's dependencies. Idempotent: an existing venv with trl importable is kept.
# Usage: benchmarks/trl_side_by_side/make_venv.sh [VENV_DIR]   (default ~/.cache/seal-platform/trl-venv)
set -euo pipefail
VENV="${1:-${SEAL_TRL_VENV:-$HOME/.cache/seal-platform/trl-venv}}"
PY="${PYTHON:-python3}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import trl, torch, transformers" 2>/dev/null; then
  echo "$VENV: trl $("$VENV/bin/python" -c 'import trl; print(trl.__version__)') already installed"
  exit 0
fi
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# trl (it brings transformers, accelerate, datasets) with the CPU build of the same torch as this project's
# venv: from pip's configured sources (a local wheel folder, if the machine has one), else PyTorch's CPU index.
"$VENV/bin/python" -m pip install -q trl "torch==2.13.0+cpu" \
  || "$VENV/bin/python" -m pip install -q trl "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
"$VENV/bin/python" -c "import trl, torch, transformers; print('trl', trl.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
