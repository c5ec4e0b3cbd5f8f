#!/usr/bin/env bash
# Runs the ONNX backend tests installed by libonnx-testdata and fails when a test listed in
# expected_pass.txt no longer passes. Usage: run_conformance.sh KILN [test-onnx flags, e.g. --fused]
set -euo pipefail
kiln=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
data=/usr/share/libonnx-testdata/data
[ -d "$data/node" ] || { echo "libonnx-testdata is not installed (run scripts/setup.sh)"; exit 1; }
"$kiln" test-onnx "$@" --expect "$here/expected_pass.txt" \
  "$data/node" "$data/pytorch-converted" "$data/pytorch-operator" "$data/simple"
