#!/usr/bin/env bash
# Builds the replica trainer for one env: bash build.sh <env>
# Output: ./puffer in the current folder (run it from there: it reads ./config/).
#
#   CC           compiler (default gcc)
#   CFLAGS       extra compiler flags, appended
#   REPLICA_FIX  comma list of fixes compiled in:
#                  omp      both OpenMP loops serialized (env_start, vec_thread_main)
#                  omp_env  only env_start's loop serialized
#                  guards   guarded dashboard reads (missing keys show as n/a)
set -euo pipefail

env_name="${1:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -z "$env_name" ]; then
    echo "usage: bash build.sh <env>   (envs: $(ls "$here/ocean" | tr '\n' ' '))" >&2
    exit 1
fi
if [ ! -f "$here/ocean/$env_name/$env_name.h" ]; then
    echo "unknown env '$env_name' (no ocean/$env_name/$env_name.h; envs: $(ls "$here/ocean" | tr '\n' ' '))" >&2
    exit 1
fi
if [ ! -f "$here/config/$env_name.ini" ]; then
    echo "env '$env_name' has no config/$env_name.ini" >&2
    exit 1
fi

defines=()
IFS=',' read -r -a fixes <<< "${REPLICA_FIX:-}"
for fix in "${fixes[@]}"; do
    fix="${fix// /}"
    case "$fix" in
        "") ;;
        omp) defines+=("-DREPLICA_SERIAL_OMP") ;;
        omp_env) defines+=("-DREPLICA_SERIAL_OMP_ENV") ;;
        guards) defines+=("-DREPLICA_GUARDED_READS") ;;
        *) echo "unknown REPLICA_FIX entry '$fix' (known: omp, omp_env, guards)" >&2; exit 1 ;;
    esac
done

cc="${CC:-gcc}"
set -x
"$cc" -O2 -g -fopenmp -pthread -std=gnu11 -Wall \
    -I"$here" -I"$here/src" \
    -DENV_HEADER="\"ocean/$env_name/$env_name.h\"" \
    "${defines[@]}" ${CFLAGS:-} \
    "$here/src/puffer.c" -o ./puffer -lm -ldl
