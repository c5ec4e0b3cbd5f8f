#!/usr/bin/python3
"""`kiln bench --compare`: kiln fused, kiln --no-fusion and the peer runtimes, each peer in its own
bench/peer_runner.py process, in alternating blocks. Checks the JSON report: every system's median
is a positive time, ONNX Runtime is always there (scripts/setup.sh installs it), OpenVINO is there
exactly when the peer's python can import it, and a bad peer python is one clear error line.

Usage: test_bench_compare.py KILN MODEL.onnx
"""
import json
import os
import subprocess
import sys

KILN, MODEL = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


r = subprocess.run([KILN, "bench", MODEL, "--compare", "--json", "--runs", "6", "--warmup", "1", "--threads", "1"],
                   capture_output=True, text=True)
check(r.returncode == 0, f"bench --compare exited {r.returncode}: {r.stderr.strip()}")
if r.returncode == 0:
    j = json.loads(r.stdout)
    for key in ("kiln", "kiln_no_fusion", "onnxruntime"):
        check(j.get(key) and j[key]["median_ms"] > 0 and j[key]["min_ms"] <= j[key]["median_ms"], f"{key}: {j.get(key)}")
    peer_python = os.environ.get("KILN_PEER_PYTHON", "python3")
    has_ov = subprocess.run([peer_python, "-c", "import openvino"], capture_output=True).returncode == 0
    if has_ov:
        check(j.get("openvino") and j["openvino"]["median_ms"] > 0, f"openvino installed but not measured: {j.get('openvino')}")
    else:
        check(j.get("openvino") is None, f"openvino not installed but reported: {j.get('openvino')}")
    check(j["runs"] == 6 and j["threads"] == 1, f"runs/threads: {j}")

env = dict(os.environ, KILN_PEER_PYTHON="/nonexistent/python")
r = subprocess.run([KILN, "bench", MODEL, "--compare", "--runs", "1"], capture_output=True, text=True, env=env)
lines = r.stderr.strip().splitlines()
check(r.returncode != 0 and len(lines) == 1 and "onnxruntime" in lines[0], f"bad peer python: {r.returncode} {lines}")

for f in failures:
    print("FAIL", f)
print(f"bench --compare: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
