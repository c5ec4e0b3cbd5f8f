#!/usr/bin/env bash
# `make demo`: export a tiny CNN from PyTorch, show what kiln sees in it and how it fuses, run it
# with kiln (compiled kernels, checked against the reference executor), compare with PyTorch, and time
# fused against unfused compiled code.
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=build/kiln
out=build/demo
mkdir -p "$out"

echo "== 1. Export a small CNN from PyTorch to ONNX (bench/models/make_models.py demo)"
/usr/bin/python3 -W ignore bench/models/make_models.py --out "$out" demo >/dev/null
echo "   wrote $out/demo.onnx, a fixed input $out/demo.input.npy and PyTorch's output"
echo
echo "== 2. kiln info: what the model contains"
"$kiln" info "$out/demo.onnx"
echo
echo "== 3. kiln show: kiln's graph IR after import and simplification (constants elided)"
"$kiln" show "$out/demo.onnx"
echo
echo "== 4. kiln explain: how the ops fuse into kernels (and why some do not)"
"$kiln" explain "$out/demo.onnx" | grep -E "^kernel |^  ops|^kernels:|^intermediate|^memory"
echo
echo "== 5. kiln run --check: compile the fused kernels to C, run them, compare each with the reference executor"
"$kiln" run "$out/demo.onnx" --input input="$out/demo.input.npy" --output-dir "$out/result" --check
echo
echo "== 6. kiln bench --compare: fused vs unfused compiled code (and ONNX Runtime when installed), interleaved"
"$kiln" bench "$out/demo.onnx" --compare --runs 20 --warmup 3
echo
echo "== 7. Compare with PyTorch"
/usr/bin/python3 - "$out" <<'PY'
import sys, numpy as np
out = sys.argv[1]
k = np.load(f"{out}/result/output.npy"); t = np.load(f"{out}/demo.output.npy")
err = np.abs(k - t).max() / np.abs(t).max()
print(f"   kiln : {np.array2string(k[0], precision=4)}")
print(f"   torch: {np.array2string(t[0], precision=4)}")
print(f"   relative error {err:.2e} (kiln's contract: <= 1e-4) -> {'OK' if err <= 1e-4 else 'MISMATCH'}")
sys.exit(0 if err <= 1e-4 else 1)
PY
