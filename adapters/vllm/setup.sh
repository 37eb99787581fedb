#!/usr/bin/env bash
# Installs vLLM (which brings its own torch) with pip, for users' GPU machines; does nothing when
# it imports already. bih itself does not need it.
set -euo pipefail
python=${PYTHON:-python3}
if "$python" -c "import vllm" >/dev/null 2>&1; then
  echo "vllm already importable by $python"
  exit 0
fi
"$python" -m pip install vllm
