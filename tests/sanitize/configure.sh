#!/usr/bin/env bash
# Configures BUILD (once) as the clang sanitizer build (-DKILN_SANITIZE=ON, CMakeLists.txt) that
# both `make sanitize` and `make fuzz-import` use. Usage: configure.sh BUILD
set -euo pipefail
BUILD=${1:?build dir}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  CC=${CC_SANITIZE:-clang-14} CXX=${CXX_SANITIZE:-clang++-14} \
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKILN_SANITIZE=ON "${launcher[@]}" >/dev/null
fi
