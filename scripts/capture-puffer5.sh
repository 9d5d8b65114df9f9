#!/usr/bin/env bash
# Capture real PufferLib 5.0 trainer output as a test fixture, to replace the hand-written
# tests/data/puffer5_sample.txt (see tests/data/README.md). Run it on a GPU host with CUDA,
# NCCL, NVML and ccache, on a checkout of branch 5.0:
#
#   scripts/capture-puffer5.sh PUFFERLIB_CHECKOUT [ENV]     # ENV defaults to breakout
#
# It builds ENV with the checkout's own build.sh (in the checkout: use a scratch clone),
# runs `./puffer train ENV` with stdout and stderr through a pipe, as the harness reads
# them, for at most $TIMEOUT s (default 300), and writes tests/data/puffer5_captured_ENV.txt.
# STEPS (default 2000000) sets --train.total-timesteps.
set -euo pipefail

usage() {
    echo "usage: $0 PUFFERLIB_CHECKOUT [ENV]   (ENV defaults to breakout; STEPS, TIMEOUT env vars)" >&2
    exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
case "$1" in -h | --help) usage ;; esac
checkout="$1"
env_name="${2:-breakout}"
steps="${STEPS:-2000000}"
limit="${TIMEOUT:-300}"
if [ ! -f "$checkout/build.sh" ] || [ ! -d "$checkout/src" ]; then
    echo "$0: $checkout is not a PufferLib 5.0 checkout (no build.sh and src/)" >&2
    usage
fi
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/tests/data/puffer5_captured_${env_name}.txt"

cd "$checkout"
echo "capture-puffer5: commit $(git rev-parse HEAD 2>/dev/null || echo unknown)" >&2
bash build.sh "$env_name"
rc=0
# the scenario's 5.0 arguments (scenarios/breakout.toml): no evaluation episodes at the end
timeout "$limit" ./puffer train "$env_name" --train.total-timesteps="$steps" \
    --base.eval-episodes=0 >"$out" 2>&1 || rc=$?
echo "wrote $out (trainer exit $rc, $(wc -l <"$out") lines)"
echo "check it: harness check tests/data/puffer5_captured_${env_name}.txt --scenario $env_name --pin pufferlib-5.0"
