#!/usr/bin/python3
"""Run one exported model through `kiln run --reference` and compare with PyTorch's output.

Usage: /usr/bin/python3 tests/models/check_model.py KILN MODEL_DIR NAME [--tol 1e-4] [--keep]

MODEL_DIR holds NAME.onnx, NAME.input.npy, NAME.output.npy and NAME.json as written by
bench/models/make_models.py. The check passes when
    max|kiln - torch| / max|torch| <= tol
(a relative error normalised by the output's largest magnitude rather than per element, so
near-zero elements of the output do not dominate). Exits 0 on a match, 1 on a mismatch or any
failure to run.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np


def fail(name, message):
    print(f"FAIL {name}: {message}", flush=True)
    return 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kiln", help="path to the kiln binary")
    parser.add_argument("model_dir", help="directory written by make_models.py")
    parser.add_argument("name", help="model name, e.g. resnet18")
    parser.add_argument("--tol", type=float, default=1e-4, help="max relative error (default %(default)g)")
    parser.add_argument("--keep", action="store_true", help="keep kiln's output directory")
    parser.add_argument("--mode", choices=["reference", "fused-plan", "check", "check-strict"], default="reference",
                        help="kiln run --reference, --fused-plan (the fusion plan kernel by kernel), "
                             "--check (compiled, each kernel compared with the reference within 1e-4), or "
                             "check-strict (--check --strict-fp: each kernel bit-identical to the reference)")
    parser.add_argument("--device", default="", help="kiln run --device D (opencl, cuda); with --mode check")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before kiln is killed")
    args = parser.parse_args()

    name = args.name
    base = os.path.join(args.model_dir, name)
    try:
        with open(base + ".json") as f:
            meta = json.load(f)
    except OSError as e:
        return fail(name, f"cannot read metadata: {e} (run bench/models/make_models.py first)")
    input_name, output_name = meta["input_name"], meta["output_name"]
    expected = np.load(base + ".output.npy")

    out_dir = tempfile.mkdtemp(prefix=f"kiln-{name}-")
    try:
        cmd = [args.kiln, "run", base + ".onnx", "--input", f"{input_name}={base}.input.npy",
               "--output-dir", out_dir] + (["--check", "--strict-fp"] if args.mode == "check-strict" else ["--" + args.mode])
        if args.device:
            cmd += ["--device", args.device]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return fail(name, f"kiln run timed out after {args.timeout:g}s")
        except OSError as e:
            return fail(name, f"cannot start kiln: {e}")
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.stdout.write(proc.stdout)
            sys.stdout.write(proc.stderr)
            return fail(name, f"kiln run exited with status {proc.returncode}: {' '.join(cmd)}")

        # A slow path is never silent: kiln names library kernels on stderr, and none of these
        # models may have one (every op they use has a loop spelling).
        if args.mode.startswith("check") and "run as library kernels" in proc.stderr:
            line = next(l for l in proc.stderr.splitlines() if "run as library kernels" in l)
            return fail(name, f"library kernels in the compiled model: {line}")

        got_path = os.path.join(out_dir, output_name + ".npy")
        if not os.path.exists(got_path):
            return fail(name, f"kiln wrote no {output_name}.npy (found: {sorted(os.listdir(out_dir))})")
        got = np.load(got_path)

        if got.shape != expected.shape:
            return fail(name, f"output shape {list(got.shape)}, expected {list(expected.shape)}")
        if got.dtype != expected.dtype:
            return fail(name, f"output dtype {got.dtype}, expected {expected.dtype}")
        if not np.isfinite(got).all():
            return fail(name, f"output has {int((~np.isfinite(got)).sum())} non-finite values")

        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        scale = float(np.abs(expected).max())
        max_abs_err = float(diff.max())
        rel_err = max_abs_err / scale if scale > 0 else max_abs_err
        worst = np.unravel_index(int(diff.argmax()), diff.shape)
        verdict = "ok  " if rel_err <= args.tol else "FAIL"
        print(f"{verdict} {name}: rel err {rel_err:.3e} (tol {args.tol:g})  max abs err {max_abs_err:.3e}"
              f"  max|ref| {scale:.4g}  worst at {list(map(int, worst))}: kiln {got[worst]:.7g}"
              f" torch {expected[worst]:.7g}  kiln run {elapsed:.2f}s", flush=True)
        return 0 if rel_err <= args.tol else 1
    finally:
        if args.keep:
            print(f"  kiln output kept in {out_dir}")
        else:
            shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
