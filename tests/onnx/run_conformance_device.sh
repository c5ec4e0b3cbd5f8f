#!/usr/bin/env bash
# The conformance tests on a device: `kiln test-onnx --compiled --device D` over a fixed subset of
# the ONNX backend tests (the folders matching the globs below), failing when a test that the CPU
# compiled path passes (tests/onnx/expected_pass.txt) does not pass on the device, or when one is
# listed there but not run. The subset keeps PoCL's run-time LLVM compilation within CI's budget
# (docs/testing.md); the whole suite runs the same way with KILN_DEVICE_CONFORMANCE=all.
# Usage: run_conformance_device.sh KILN DEVICE
set -euo pipefail
kiln=$1
device=$2
here=$(cd "$(dirname "$0")" && pwd)
data=/usr/share/libonnx-testdata/data
[ -d "$data/node" ] || { echo "libonnx-testdata is not installed (run scripts/setup.sh)"; exit 1; }
if [ "${KILN_DEVICE_CONFORMANCE:-subset}" = all ]; then
  dirs=("$data/node" "$data/pytorch-converted" "$data/pytorch-operator" "$data/simple")
  grep -v '^#' "$here/expected_pass.txt" > "${TMPDIR:-/tmp}/kiln-device-expect.$$"
else
  # node/test_a* and test_l* (elementwise and broadcast ops, argmax/argmin, average pooling, layer
  # norm, log-softmax, LRN), test_einsum* (a scalar output: an empty shape constant on the
  # device), every pytorch-operator and simple test (conv, matmul, pooling, whole small models):
  # about 210 folders, each emitter kind and the int/float dtype families.
  dirs=()
  for g in "$data"/node/test_{a,l}* "$data"/node/test_einsum* "$data"/pytorch-operator/* "$data"/simple/*; do
    [ -d "$g" ] && dirs+=("$g")
  done
  : > "${TMPDIR:-/tmp}/kiln-device-expect.$$"
  for d in "${dirs[@]}"; do
    id="$(basename "$(dirname "$d")")/$(basename "$d")"
    grep -qx "$id" "$here/expected_pass.txt" && echo "$id" >> "${TMPDIR:-/tmp}/kiln-device-expect.$$" || true
  done
fi
expect="${TMPDIR:-/tmp}/kiln-device-expect.$$"
trap 'rm -f "$expect"' EXIT
echo "run_conformance_device: ${#dirs[@]} test folders, $(wc -l < "$expect") expected to pass, --device $device"
"$kiln" test-onnx --compiled --device "$device" --expect "$expect" "${dirs[@]}"
