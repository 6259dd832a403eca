#!/usr/bin/env bash
# The GPU checks of issue 19 in one call (docs/gpu.md), in order, each under its own timeout:
#
#   1. nccl_smoke  tests/gpu/nccl_smoke.py: init_process_group("nccl") with world size 1,
#                  the collective, a DDP run on CUDA, a bounded shutdown          <= 90 s
#   2. test_gpu    pytest -m gpu tests/gpu (what `make test-gpu` runs)           <= 200 s
#   3. bench_gpu   bench/gpu.py: the overhead table on the GPU                    <= 180 s
#   4. bench_async bench/async_commits.py --device cuda: blocked time per commit and the
#                  loop with a commit every epoch, 50 MB and 500 MB states, 3 epochs;
#                  its tables also to async_commits.md beside the logs            <= 100 s
#
# 570 s in all at most, so one device call of 10 minutes (the per-call limit) holds it, with
# little to spare: give the call the whole limit. Every step runs even when an earlier one
# failed; the exit code is the first failing step's (0: all passed). Logs (one per step, and
# env.log: GPU, driver, CUDA, torch) go to $OUT when it is set, else bench/out/gpu/.
#
#   bench/gpu_check.sh --fetch-wheels   # here, before the device call: the pinned pure-Python
#                                       # dependencies, as cp312 wheels, into .whl/ (git-ignored)
#   bash bench/gpu_check.sh             # on the GPU machine (carry .whl); PYTHON=... to choose
#
# The GPU image has torch, numpy, pytest, pytest-timeout, hypothesis and scikit-learn but not
# cattrs or ruamel.yaml; the wheels in .whl/ are installed into /tmp/nnx-site and put first on
# PYTHONPATH, with the repository root (NNx runs from the checkout, uninstalled).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS="attrs==26.1.0 cattrs==26.2.1 ruamel.yaml==0.19.1 portalocker==4.4.2 tqdm==4.70.1 typing_extensions==4.16.0"

if [ "${1:-}" = "--fetch-wheels" ]; then
    exclude="$(git rev-parse --git-common-dir)/info/exclude"
    mkdir -p "$(dirname "$exclude")"
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
    # shellcheck disable=SC2086  # one argument per pinned requirement
    exec "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux2014_x86_64 -d .whl $WHEELS
fi

LOG=${OUT:-bench/out/gpu}
mkdir -p "$LOG"
if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/nnx-site .whl/*.whl \
        || { echo "gpu_check: installing .whl/ failed"; exit 1; }
    export PYTHONPATH=/tmp/nnx-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 NNX_PROGRESS=0

{
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "no nvidia-smi"
    "$PY" -c 'import sys, torch, torch.distributed as d; print("python", sys.version.split()[0], "| torch", torch.__version__,
"| CUDA", torch.version.cuda, "| available", torch.cuda.is_available(), "| NCCL", d.is_nccl_available() and
".".join(map(str, torch.cuda.nccl.version())), "| capability", torch.cuda.is_available() and torch.cuda.get_device_capability())' 2>&1
    "$PY" -c 'import attrs, cattrs, ruamel.yaml, portalocker, tqdm, numpy, sklearn, pytest, pytest_timeout; print("dependencies: ok")' 2>&1
} | tee "$LOG/env.log"

status=0
step() {  # step NAME SECONDS COMMAND...: run it under a timeout, log it, keep the first failure
    local name=$1 limit=$2
    shift 2
    echo "== $name (at most ${limit}s): $*"
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$LOG/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc$([ "$rc" = 124 ] && echo ' (timed out)')"
    [ "$status" -eq 0 ] && status=$rc
    return 0
}

step nccl_smoke 90 "$PY" tests/gpu/nccl_smoke.py
step test_gpu 200 "$PY" -m pytest -m gpu tests/gpu -rs -p no:randomly
step bench_gpu 180 "$PY" bench/gpu.py
step bench_async 100 "$PY" bench/async_commits.py --device cuda --sizes 50,500 --epochs 3 --reps 2 --loop-reps 1 --out "$LOG/async_commits.md"
echo "gpu_check: exit $status (logs in $LOG)"
exit "$status"
