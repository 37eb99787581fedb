#!/usr/bin/env bash
# Installs what the transformers adapter imports (torch, transformers) with pip, for users' GPU
# machines; does nothing when both import already. bih itself needs neither.
set -euo pipefail
python=${PYTHON:-python3}
if "$python" -c "import torch, transformers" >/dev/null 2>&1; then
  echo "torch and transformers already importable by $python"
  exit 0
fi
"$python" -m pip install transformers torch
