#!/usr/bin/env bash
# Sets up everything the harness needs on a Debian/Ubuntu host: system packages (gcc with
# libgomp, clang with libomp, gdb, elfutils for eu-stack, git), then a virtual environment
# in .venv with the harness and its development tools. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")"

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
have gcc || need_pkgs+=(gcc libc6-dev)
have gdb || need_pkgs+=(gdb)
have eu-stack || need_pkgs+=(elfutils)
have strace || need_pkgs+=(strace)   # what a polling loop polls (sampling/polltrace.py)
have git || need_pkgs+=(git)
have ccache || need_pkgs+=(ccache)   # the 5.0 build.sh compiles through ccache
have ninja || need_pkgs+=(ninja-build)   # a corpus hang runs ninja (tests/realworld)
have flock || need_pkgs+=(util-linux)    # a corpus hang runs flock(1)
if ! echo 'int main(void){return 0;}' | gcc -fopenmp -x c - -o /dev/null 2>/dev/null; then
  need_pkgs+=(libgomp1)
fi
# --hazards' tests and the replica built to pass here: clang with LLVM's libomp (a runtime
# that survives fork) and llvm-symbolizer, which names clang's inlined frames
if ! echo 'int main(void){return 0;}' | clang -fopenmp -x c - -o /dev/null 2>/dev/null; then
  need_pkgs+=(clang libomp-dev)
fi
python3 -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
# the report.html tests open the page in a real browser: Debian's Chromium, driven by
# Playwright's Python API (no browser download)
have chromium || have chromium-browser || need_pkgs+=(chromium)

if ((${#need_pkgs[@]})); then
  echo "setup: installing system packages: ${need_pkgs[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.harness-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing the harness and its tools into .venv (a minute or two the first time)"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # the install log is kept and shown only on failure (build backends are chatty)
  if ! .venv/bin/python -m pip install -e '.[dev]' >.venv/pip-install.log 2>&1; then
    grep -v 'is ignored: it is neither' .venv/pip-install.log | tail -40 >&2
    echo "setup: pip install failed (full log: .venv/pip-install.log)" >&2
    exit 1
  fi
  # torch's CPU wheel (on the local index): the doctor's GPU checks are tested on their skip
  # path here; a bare `torch` would pull the multi-GB CUDA build
  if ! .venv/bin/python -m pip install -q 'torch==2.13.0' >>.venv/pip-install.log 2>&1; then
    echo "setup: torch 2.13.0 (CPU) not installed: the doctor's torch tests will skip (and fail under CI)" >&2
  fi
  # the real-world hang corpus (tests/realworld): scikit-learn (a wheel that vendors libgomp),
  # mpi4py with the `mpich` wheel (mpiexec and libmpi from the registry, no compiler needed),
  # posix_ipc (named POSIX semaphores; a binary wheel)
  if ! .venv/bin/python -m pip install -q 'scikit-learn==1.9.1' 'mpi4py==4.1.2' 'mpich==5.0.2' 'posix_ipc==1.3.2' >>.venv/pip-install.log 2>&1; then
    echo "setup: scikit-learn/mpi4py/mpich/posix_ipc not installed: the corpus's cases will skip (and fail under CI)" >&2
  fi
  touch "$stamp"
fi
echo "setup: ready ($(.venv/bin/harness --version); gcc $(gcc -dumpversion); $(gdb --version | head -1))"
