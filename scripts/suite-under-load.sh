#!/usr/bin/env bash
# The test suite beside busy loops, as on a loaded CI runner or a shared machine: a test that
# holds only on an idle host (a window without slack, a sleep instead of a wait on what it
# expects) fails here first.
#
#   scripts/suite-under-load.sh [--load N] [PYTEST ARGS ...]
#
# Runs the README's test command (.venv/bin/python -m pytest) with PYTEST ARGS passed through
# (none: the whole suite), beside N busy loops (default: one per core, `nproc`), then lists
# each failed or errored test from the run's JUnit XML (JUNIT, default a new temporary file;
# its path is printed). The loops are killed on every way out of this script (its end, an
# error, Ctrl-C, SIGTERM, SIGHUP); each also ends by itself once this script is gone, even
# SIGKILLed (it checks its parent). Ctrl-C reaches pytest itself (it stops as it does without
# this script, the JUnit XML written); SIGTERM or SIGHUP of the script is passed on to
# pytest. The exit status is pytest's, or 128+N after signal N.
set -euo pipefail

usage() {
    echo "usage: $0 [--load N] [PYTEST ARGS ...]   (JUNIT=PATH keeps the JUnit XML there)" >&2
    exit 2
}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$root/.venv/bin/python"
loops="$(nproc)"
if [ "${1:-}" = "--load" ]; then
    [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage
    loops="$2"
    shift 2
fi
case "${1:-}" in -h | --help) usage ;; esac
[ -x "$python" ] || { echo "$0: no $python (run ./setup.sh first)" >&2; exit 2; }
junit="${JUNIT:-$(mktemp -d)/junit.xml}"

pids=()
test_pid=""
signalled=""
stop_loops() {
    # only the loops started here, by their pids; `wait` reaps them so none is left behind
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
on_signal() {  # SIGNAL EXIT_STATUS: the loops stop now; pytest is waited for below
    signalled="$2"
    stop_loops
    # Ctrl-C came to pytest too (one process group); a TERM or HUP was sent to us alone
    if [ "$1" != INT ] && [ -n "$test_pid" ]; then kill -TERM "$test_pid" 2>/dev/null || true; fi
}
trap stop_loops EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# a busy loop that looks up from its spinning every ~10 ms of work: when this script is gone
# (its parent changes), it stops, so even a SIGKILL of the script leaves no loop spinning
busy='import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(200_000):
        pass'
for _ in $(seq 1 "$loops"); do
    "$python" -I -S -c "$busy" &
    pids+=("$!")
done
echo "suite-under-load: $loops busy loop(s) beside pytest on $(nproc) core(s); JUnit XML: $junit" >&2

# pytest runs in the background, so that a signal's trap runs at once (bash runs it only
# after a foreground command ends: the loops would spin on to the end of the suite); a
# background job starts with SIGINT ignored, which pytest would keep, so it is restored
run_pytest='import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])'
(cd "$root" && exec "$python" -c "$run_pytest" --junitxml="$junit" "$@") &
test_pid=$!
while :; do
    status=0
    wait "$test_pid" || status=$?
    # a trapped signal ends `wait` early (128+N) while pytest still runs: wait again
    kill -0 "$test_pid" 2>/dev/null || break
done
test_pid=""
stop_loops

if [ -s "$junit" ]; then
    "$python" - "$junit" "$root" <<'EOF'
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

junit, root = Path(sys.argv[1]), Path(sys.argv[2])
cases = list(ET.parse(junit).getroot().iter("testcase"))
bad = []
for case in cases:
    for outcome in ("failure", "error"):
        for found in case.findall(outcome):
            # the test's node id: the module's path where the class name is one
            classname, name = case.get("classname", ""), case.get("name", "")
            name = re.sub(r"@[^\[\]]*$", "", name)  # xdist's `@group`: not in a node id
            module = classname.replace(".", "/") + ".py"
            where = f"{module}::{name}" if (root / module).is_file() else f"{classname}::{name}"
            said = (found.get("message") or "").strip().splitlines()
            bad.append(f"{outcome.upper()} {where}" + (f": {said[0][:160]}" if said else ""))
skipped = sum(1 for case in cases if case.find("skipped") is not None)
print(f"suite-under-load: {len(cases)} tests, {len(bad)} failed or errored, {skipped} skipped")
for line in bad:
    print(f"  {line}")
EOF
else
    echo "suite-under-load: no JUnit XML was written ($junit)" >&2
fi
exit "${signalled:-$status}"
