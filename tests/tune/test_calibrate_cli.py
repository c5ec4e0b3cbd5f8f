#!/usr/bin/python3
"""`kiln calibrate` end to end (no timing assertions: the machine is shared):

- calibrating two models writes one cost sample per distinct kernel (JSON lines, schema 1, fused and
  unfused builds), reports per-class factors and, per model and build, the plain roofline, the
  calibrated and the held-out estimate next to the measured time;
- a second run without models fits from the file; a corrupted line is one warning; a samples file
  that is a folder, no samples for this machine, and --runs 1 are one error line and a non-zero exit;
- the calibration is used: `kiln roofline` prints and reports the calibrated estimate at the
  calibrated thread count (and says none at another), `kiln explain --target native` plans with
  it, and `kiln tune` adds its profile of the default build to the samples.

Usage: test_calibrate_cli.py KILN MODELS_DIR
"""
import json
import os
import shutil
import tempfile

from cli_check import MODELS, check, finish, kiln

DEMO, MLP = os.path.join(MODELS, "demo.onnx"), os.path.join(MODELS, "mlp_ln.onnx")


def one_error_line(r, what, needle):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode != 0, f"{what}: exit 0")
    check(len(lines) == 1 and needle in lines[0], f"{what}: expected one error line with {needle!r}: {r.stderr!r}")


tmp = tempfile.mkdtemp(prefix="kiln_calibrate_test_")
os.chmod(tmp, 0o700)
samples = os.path.join(tmp, "samples.jsonl")

r = kiln("calibrate", DEMO, MLP, "--threads", "1", "--runs", "3", "--samples", samples, "--json")
check(r.returncode == 0, f"calibrate exited {r.returncode}: {r.stderr.strip()[-400:]}")
rep = json.loads(r.stdout) if r.returncode == 0 else {}
models = {m["model"]: m for m in rep.get("models", [])}
check(set(models) == {"demo", "demo (unfused)", "mlp_ln", "mlp_ln (unfused)"}, f"models reported: {sorted(models)}")
for name, m in models.items():
    for k in ("measured_ms", "kernel_ms", "roofline_ms", "calibrated_ms", "held_out_ms"):
        check(isinstance(m.get(k), (int, float)) and m[k] > 0, f"{name}: {k} = {m.get(k)}")
    check(len(m.get("kernels", [])) >= 1, f"{name}: no kernels listed")
check("all" in rep.get("classes", {}), f"no 'all' class: {rep.get('classes')}")
for cls, f in rep.get("classes", {}).items():
    check(f["compute"] > 0 and f["memory"] > 0 and 0 <= f["overhead_us"] <= 1.0 and f["samples"] >= 1,
          f"class {cls}: factors out of range {f}")
lines = [json.loads(l) for l in open(samples)] if os.path.exists(samples) else []
sigs = {s["signature"] for m in models.values() for s in [{"signature": k} for k in m["kernels"]]}
check(len(lines) == len(sigs), f"{len(lines)} samples for {len(sigs)} distinct kernels")
for s in lines:
    check(s.get("schema") == 1 and s.get("threads") == 1 and s.get("ms", 0) > 0 and s.get("class"), f"bad sample {s}")
check(rep.get("samples") == len(lines), f"report counts {rep.get('samples')} samples, file has {len(lines)}")

# From the file alone; a corrupted line is one warning.
with open(samples, "a") as f:
    f.write("{not json\n")
r = kiln("calibrate", "--threads", "1", "--samples", samples)
check(r.returncode == 0, f"calibrate from the file exited {r.returncode}: {r.stderr.strip()}")
check("all " in r.stdout and "overhead us" in r.stdout, f"no class table: {r.stdout!r}")
warn = [l for l in r.stderr.splitlines() if "warning" in l]
check(len(warn) == 1 and "not cost samples" in warn[0], f"warnings: {warn}")

one_error_line(kiln("calibrate", "--threads", "1", "--samples", tmp), "a folder as samples file", "cost samples")
empty = os.path.join(tmp, "empty.jsonl")
open(empty, "w").close()
one_error_line(kiln("calibrate", "--threads", "1", "--samples", empty), "no samples", "no cost samples of")
one_error_line(kiln("calibrate", DEMO, "--runs", "1", "--samples", empty), "--runs 1", "--runs")

# The default file under a private cache folder: roofline, explain --target native and tune use it.
cache = os.path.join(tmp, "cache")
os.makedirs(os.path.join(cache, "kiln"), mode=0o700)
probe = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kiln", "machine.json")
if os.path.exists(probe):
    shutil.copy(probe, os.path.join(cache, "kiln", "machine.json"))  # saves a probe
env = dict(os.environ, XDG_CACHE_HOME=cache)
r = kiln("calibrate", DEMO, MLP, "--threads", "1", "--runs", "3", env=env)
check(r.returncode == 0, f"calibrate (default file) exited {r.returncode}: {r.stderr.strip()[-300:]}")
check(os.path.exists(os.path.join(cache, "kiln", "cost_samples.jsonl")), "no default samples file")
r = kiln("roofline", DEMO, "--threads", "1", "--runs", "2", "--fused-only", env=env)
check(r.returncode == 0 and "calibrated cost model (" in r.stdout, f"roofline without calibration line: {r.stdout[-300:]}")
r = kiln("roofline", DEMO, "--threads", "1", "--runs", "2", "--fused-only", "--json", env=env)
rj = json.loads(r.stdout) if r.returncode == 0 else {}
check(rj.get("calibration_samples", 0) > 0 and rj.get("calibrated_ms", 0) > 0, f"roofline JSON: {r.stdout[:300]}")
check(all(k.get("cost_class") and k.get("estimated_ms", 0) > 0 for k in rj.get("kernels", [])), "kernel estimates missing")
if (os.cpu_count() or 1) >= 2:
    r = kiln("roofline", DEMO, "--threads", "2", "--runs", "2", "--fused-only", env=env)
    check(r.returncode == 0 and "calibrated cost model: none for this machine" in r.stdout,
          f"roofline at 2 threads should have no calibration: {r.stdout[-300:]}")
r = kiln("explain", MLP, "--target", "native", "--threads", "1", env=env)
check(r.returncode == 0 and "calibrated by kiln calibrate" in r.stdout, f"explain --target native: {r.stdout[-300:]}")
tuned_samples = os.path.join(tmp, "tuned.jsonl")
r = kiln("tune", DEMO, "--budget", "2s", "--threads", "1", "--records", os.path.join(tmp, "rec.jsonl"),
         "--samples", tuned_samples, env=env)
check(r.returncode == 0, f"tune exited {r.returncode}: {r.stderr.strip()[-300:]}")
ts = [json.loads(l) for l in open(tuned_samples)] if os.path.exists(tuned_samples) else []
check(len(ts) >= 1 and all(s["model"] == "demo" for s in ts), f"tune's samples: {ts}")

shutil.rmtree(tmp, ignore_errors=True)
finish("test_calibrate_cli")
