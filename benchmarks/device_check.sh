#!/bin/bash
# The prepared GPU checks, for a session lent a device machine (one call, about 3 min):
#   run(command="bash benchmarks/device_check.sh", timeout_s=420)
# Needs only the device image's python3 (PyTorch, nvidia-ml-py, PyYAML) and this checkout:
# the energy and monitor modules it loads import nothing else. Output also under $OUT.
set -u -o pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,driver_version,power.limit,power.default_limit,power.min_limit,power.max_limit,clocks.max.sm \
    --format=csv 2>&1 | tee "$out/nvidia-smi.csv"
timeout 150 python3 benchmarks/device_check.py 2>&1 | tee "$out/device_check.txt"
rc=$?
timeout 240 python3 benchmarks/gpu_energy.py --sweep --seconds 4 2>&1 | tee "$out/gpu_energy.txt"
exit $(( rc | $? ))
