#!/usr/bin/env bash
# `seal-platform verify` against the thinnest official command (benchmarks/bench_verifier.py --commands) on
# 1, 2, 4, ... of this machine's CPUs, up to all it may use: verify forks one lane per usable CPU, the official
# command runs in one process, so their ratio depends on the cores (issue 26 item 6; docs/benchmarks.md).
#
#   bash benchmarks/cpu_scaling_verify.sh            # here: the project's .venv
#   ROUNDS=3 bash benchmarks/cpu_scaling_verify.sh   # fewer rounds per side
#   COUNTS="1 16" bash benchmarks/cpu_scaling_verify.sh   # only these numbers of CPUs
#
# On a machine without the project installed (a lent device machine: Python and pip only), it installs the
# wheels in .whl/ (pydantic, bfcl-eval, click, ... for that machine's Python) and runs the checkout from
# PYTHONPATH (benchmarks/device_site.sh, as gpu_checks.sh does); seal_platform.egg-info must come along.
# Run it on an otherwise idle machine.
set -u
export PYTHONUNBUFFERED=1
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  source benchmarks/device_site.sh || exit 1
  PY=python3
fi
usable=$("$PY" -c "import os; print(len(os.sched_getaffinity(0)))")
cpus=$("$PY" -c "import os; print(sorted(os.sched_getaffinity(0)))" | tr -d '[] ')
counts=()
n=1
while [ "$n" -lt "$usable" ]; do counts+=("$n"); n=$((n * 2)); done
counts+=("$usable")
if [ -n "${COUNTS:-}" ]; then read -r -a counts <<< "$COUNTS"; fi
echo "usable CPUs: $usable ($cpus); $(uptime)"
"$PY" -c "import sys, platform; print('python', sys.version.split()[0], platform.processor() or platform.machine())"
for k in "${counts[@]}"; do
  set_=$(echo "$cpus" | cut -d, -f1-"$k")
  echo
  echo "=== $k CPU(s): taskset -c $set_ ==="
  taskset -c "$set_" "$PY" benchmarks/bench_verifier.py --commands --rounds "${ROUNDS:-5}" || exit 1
done
echo
echo "=== where ours spends its time on all $usable CPUs (benchmarks/verify_phases.py) ==="
"$PY" benchmarks/verify_phases.py --cases --runs 3
