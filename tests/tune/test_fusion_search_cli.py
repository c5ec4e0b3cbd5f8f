#!/usr/bin/python3
"""kiln tune's fusion decisions end to end on the demo model (no timing assertions):

- `kiln tune` measures the demo's close decision (conv + ReLU) and writes a fusion record (emitter
  "fusion", the graph's fingerprint and the pair), prints the decision table and the default plan
  against the best plan; `--no-fusion-search` writes none;
- a record that keeps the pair apart is used by explain (the refusal names the records), bench and
  run (one kernel more; `kiln run --check` within the tolerance), and not with --no-records;
- a second tune takes the decision from the records without measuring it.

Usage: test_fusion_search_cli.py KILN MODELS_DIR
"""
import json
import os
import re
import shutil
import tempfile

from cli_check import MODELS, check, finish, kiln

DEMO = os.path.join(MODELS, "demo.onnx")


def records(path):
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []


tmp = tempfile.mkdtemp(prefix="kiln_fusion_search_test_")
rec = os.path.join(tmp, "records.jsonl")
samples = os.path.join(tmp, "samples.jsonl")

r = kiln("tune", DEMO, "--budget", "8s", "--threads", "1", "--records", rec, "--samples", samples)
check(r.returncode == 0, f"tune exited {r.returncode}: {r.stderr.strip()[-400:]}")
check("fusion (close decisions" in r.stdout, f"no fusion table: {r.stdout[:600]}")
fusion = [x for x in records(rec) if x.get("emitter") == "fusion"]
check(len(fusion) == 1, f"expected one fusion record, got {fusion}")
if fusion:
    f = fusion[0]
    check(re.fullmatch(r"[0-9a-f]{16}", f.get("graph", "")) is not None, f"graph fingerprint: {f.get('graph')}")
    check(f.get("apart_a", "").endswith("Conv") and f.get("apart_b", "").endswith("Relu"), f"pair: {f}")
    check(f["default_ms"] > 0 and f["tuned_ms"] > 0, f"times: {f}")
    m = re.search(r"(\d+) close decisions, (\d+) measured", r.stdout)
    check(m is not None and m.group(2) == "1", f"measured count: {r.stdout}")

rec2 = os.path.join(tmp, "records2.jsonl")
r = kiln("tune", DEMO, "--budget", "3s", "--threads", "1", "--records", rec2, "--no-fusion-search")
check(r.returncode == 0, f"tune --no-fusion-search exited {r.returncode}: {r.stderr.strip()[-300:]}")
check(not [x for x in records(rec2) if x.get("emitter") == "fusion"], "--no-fusion-search wrote a fusion record")

# Plant "kept apart" and check every command follows it.
if fusion:
    lines = records(rec)
    for x in lines:
        if x.get("emitter") == "fusion":
            x["improved"] = True
            x["tuned_ms"] = x["default_ms"] / 2
    with open(rec, "w") as fh:
        fh.write("".join(json.dumps(x) + "\n" for x in lines))
    r = kiln("explain", DEMO, "--threads", "1", "--records", rec)
    check(r.returncode == 0 and "kept apart: kiln tune measured" in r.stdout, f"explain: {r.stdout[-500:]}")
    kernels = lambda out: int(re.search(r"^kernels: (\d+)", out, re.M).group(1))
    base = kiln("explain", DEMO, "--threads", "1", "--no-records")
    check(base.returncode == 0 and "kept apart" not in base.stdout, "--no-records still keeps the pair apart")
    if r.returncode == 0 and base.returncode == 0:
        check(kernels(r.stdout) == kernels(base.stdout) + 1, "keeping the pair apart should add one kernel")
    b = kiln("bench", DEMO, "--threads", "1", "--runs", "3", "--records", rec)
    bk = re.search(r"(\d+) kernels\)", b.stdout)
    check(b.returncode == 0 and bk is not None and int(bk.group(1)) == kernels(r.stdout),
          f"bench does not build the kept-apart plan: {b.stdout} {b.stderr}")
    out = os.path.join(tmp, "out")
    inp = os.path.join(MODELS, "demo.input.npy")
    name = json.load(open(os.path.join(MODELS, "demo.json")))["input_name"] if os.path.exists(
        os.path.join(MODELS, "demo.json")) else None
    if name:
        c = kiln("run", DEMO, "--input", f"{name}={inp}", "--output-dir", out, "--threads", "1", "--records", rec,
                 "--check")
        check(c.returncode == 0, f"run --check with the kept-apart plan: {c.stderr.strip()[-300:]}")
    # A second tune takes the decision from the records.
    r = kiln("tune", DEMO, "--budget", "3s", "--threads", "1", "--records", rec, "--samples", samples)
    check(r.returncode == 0 and "kept apart (recorded)" in r.stdout, f"second tune: {r.stdout[:800]}")

shutil.rmtree(tmp, ignore_errors=True)
finish("test_fusion_search_cli")
