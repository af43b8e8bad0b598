#!/bin/bash
# The prepared GPU check of issue 5, for a session lent a device machine (one call, ~5 min):
#   run(command="bash benchmarks/device_check.sh", timeout_s=540)
# Needs only the device image's python3 (PyTorch, nvidia-ml-py) and this checkout: the
# energy modules import nothing outside the standard library. Output also under $OUT.
set -u -o pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,driver_version,power.limit,power.default_limit,clocks.max.sm \
    --format=csv 2>&1 | tee "$out/nvidia-smi.csv"
python3 - <<'PY' 2>&1 | tee "$out/nvml-devices.txt"
from slurm_hetero.energy.devices import open_devices
layer = open_devices("nvml")
print("nvml devices:", layer.devices() or getattr(layer, "why", ""))
PY
timeout 480 python3 benchmarks/gpu_energy.py --sweep --seconds 5 2>&1 | tee "$out/gpu_energy.txt"
