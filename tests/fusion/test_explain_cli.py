#!/usr/bin/python3
"""`kiln explain` output contract: the JSON schema later issues and external checks rely on, the
text summary lines, --dot (one cluster per kernel) and --svg (well-formed SVG via Graphviz), and
--no-fusion / --fusion-fuel, and the launches saved on the GPU targets.

Usage: test_explain_cli.py KILN MODEL_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

kiln, model_dir = sys.argv[1], sys.argv[2]
model = os.path.join(model_dir, "encoder.onnx")
problems = []


def run(*args):
    r = subprocess.run([kiln, "explain", model, *args], capture_output=True, text=True)
    if r.returncode != 0:
        problems.append(f"kiln explain {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def check(cond, what):
    if not cond:
        problems.append(what)


plan = json.loads(run("--json"))
check(isinstance(plan["kernel_count"], int), "kernel_count is not an int")
check(len(plan["kernels"]) == plan["kernel_count"], "kernels list length != kernel_count")
for k in plan["kernels"]:
    for field, typ in [("name", str), ("ops", list), ("kind", str), ("flops", (int, float)),
                       ("bytes_read", int), ("bytes_written", int)]:
        check(isinstance(k.get(field), typ), f"kernel field {field} missing or mistyped in {k.get('name')}")
    check(k["name"].startswith("fused_"), f"kernel name {k['name']} is not fused_<ops>_<n>")
for r in plan["rejected"]:
    check(all(isinstance(r.get(f), str) and r.get(f) for f in ("producer", "consumer", "reason")),
          f"rejected entry incomplete: {r}")
for f in ("intermediate_bytes_unfused", "intermediate_bytes_fused"):
    check(isinstance(plan[f], int), f"{f} is not an int")
check(plan["intermediate_bytes_fused"] < plan["intermediate_bytes_unfused"], "fusion did not reduce intermediate bytes")
# Hand count per layer: QKV 2*128*768*2304, attention 2*(2*12*128*128*64), out-proj 2*128*768*768,
# FFN 2*(2*128*768*3072) = 1.862 GFLOP; two layers 3.72 GFLOP, plus the elementwise and reductions.
flops = sum(k["flops"] for k in plan["kernels"])
check(3.72e9 <= flops <= 3.76e9, f"encoder FLOPs {flops:.4g} disagree with the hand count 3.72e9 (+ small ops)")

unfused = json.loads(run("--json", "--no-fusion"))
check(unfused["kernel_count"] > plan["kernel_count"], "--no-fusion did not give more kernels")
check(unfused["intermediate_bytes_fused"] == unfused["intermediate_bytes_unfused"], "--no-fusion still fuses bytes")
check(unfused["kernels_unfused"] == unfused["kernel_count"], "--no-fusion: unfused launches != its kernels")
check(plan["kernels_unfused"] == unfused["kernel_count"], "kernels_unfused disagrees with --no-fusion's kernel count")
# GPU targets: the launches the plan saves, priced at the target's launch cost (in its estimates).
for target, launch_us in (("cuda-sm80", 5.0), ("cuda-sm90", 5.0), ("opencl", 10.0)):
    gpu = json.loads(run("--json", "--target", target))
    check(gpu["target"] == target and gpu["launch_overhead_us"] == launch_us, f"--target {target}: {gpu['target']}")
    check(gpu["kernels_unfused"] > gpu["kernel_count"] > 0, f"--target {target} saved no launches")
    line = f"launches per inference: {gpu['kernel_count']} ({gpu['kernels_unfused']} unfused): "
    line += f"{gpu['kernels_unfused'] - gpu['kernel_count']} saved, "
    line += f"{(gpu['kernels_unfused'] - gpu['kernel_count']) * launch_us:.1f} us of launch overhead"
    check(line in run("--target", target), f"--target {target} text lacks '{line}'")
one = json.loads(run("--json", "--fusion-fuel", "1"))
check(one["accepted_fusions"] == 1 and one["kernel_count"] == unfused["kernel_count"] - 1,
      f"--fusion-fuel 1 gave {one['accepted_fusions']} fusions / {one['kernel_count']} kernels")

text = run()
for line in ("kernels: ", "launches per inference: ", "intermediate bytes to DRAM: ", "estimated time: "):
    check(line in text, f"text output lacks '{line}'")

with tempfile.TemporaryDirectory() as d:
    dot, svg = os.path.join(d, "plan.dot"), os.path.join(d, "plan.svg")
    run("--dot", dot, "--svg", svg)
    src = open(dot).read() if os.path.exists(dot) else ""
    check(src.count("subgraph cluster_") >= plan["kernel_count"], "DOT has fewer clusters than kernels")
    try:
        root = ET.parse(svg).getroot()
        check(root.tag.endswith("svg"), "SVG root is not <svg>")
    except Exception as e:  # noqa: BLE001 - any parse failure is the finding
        problems.append(f"SVG not well-formed: {e}")
    check(sorted(os.listdir(d)) == ["plan.dot", "plan.svg"], f"stray files: {os.listdir(d)}")

for p in problems:
    print("FAIL", p)
print("explain CLI: " + ("ok" if not problems else f"{len(problems)} problems"))
sys.exit(1 if problems else 0)
