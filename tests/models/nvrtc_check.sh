#!/usr/bin/env bash
# Every kernel of every public model compiled by NVRTC for sm_80 and sm_90 (kiln emit --device cuda
# --nvrtc, which also requires one PTX entry point per launch), then `kiln run --device cuda`:
# on a machine without a CUDA driver or GPU it must fail with exactly one line, naming CUDA.
# Usage: nvrtc_check.sh KILN MODEL_DIR
set -uo pipefail
kiln=$1
dir=$2
failed=0
for m in demo mlp_ln encoder resnet18 mobilenet_v2; do
  if ! out=$("$kiln" emit "$dir/$m.onnx" --device cuda --nvrtc sm_80,sm_90 2>&1); then
    echo "nvrtc_check: $m: $out" | head -5
    failed=1
    continue
  fi
  echo "nvrtc_check: $m: $(echo "$out" | tr '\n' ' ')"
done
# Without a driver: one line on stderr, nonzero exit, no output written.
if ! ldconfig -p | grep -q 'libcuda\.so\.1' && [ ! -e /dev/nvidiactl ]; then
  out=$(mktemp -d)
  err=$("$kiln" run "$dir/demo.onnx" --input "input=$dir/demo.input.npy" --output-dir "$out/o" --device cuda 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ $rc -eq 0 ] || [ "$lines" -ne 1 ] || ! printf '%s' "$err" | grep -q 'device cuda' || [ -e "$out/o" ]; then
    echo "nvrtc_check: --device cuda without a driver: exit $rc, $lines lines: $err"
    failed=1
  else
    echo "nvrtc_check: no CUDA driver here; --device cuda says: $err"
  fi
  rm -rf "$out"
fi
exit $failed
