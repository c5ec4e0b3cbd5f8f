#!/usr/bin/python3
"""`kiln roofline` output contract: the JSON schema (machine, totals, kernels with their roofline
fields, the unfused build under "unfused"), the bound and percent-of-roof rules applied to the
reported figures, resnet18's FLOP count against the independent 3.64 GFLOP, and --svg / --html
well-formed with the expected elements.

Usage: test_roofline_cli.py KILN MODEL_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

kiln, model_dir = sys.argv[1], sys.argv[2]
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


def roofline(model, *args):
    r = subprocess.run([kiln, "roofline", os.path.join(model_dir, model), "--runs", "2", "--warmup", "1", *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        problems.append(f"kiln roofline {model} {' '.join(args)} failed: {r.stderr.strip()}")
        return None
    return r.stdout


def check_report(rep, where, roof):
    for field, typ in [("total_flops", (int, float)), ("kernel_flops", (int, float)), ("total_dram_bytes", int),
                       ("kernel_ms", (int, float)), ("model_ms", (int, float)), ("kernels", list),
                       ("kernel_count", int), ("summary", dict)]:
        check(isinstance(rep.get(field), typ), f"{where}: {field} missing or mistyped")
    ks = rep.get("kernels", [])
    check(len(ks) == rep.get("kernel_count"), f"{where}: kernels length != kernel_count")
    check(ks == sorted(ks, key=lambda k: -k["time_ms"]), f"{where}: kernels not sorted by time")
    peak, bw = roof["peak_gflops"], roof["dram_gbps"]
    for k in ks:
        for field, typ in [("name", str), ("flops", (int, float)), ("dram_bytes", int), ("time_ms", (int, float)),
                           ("gflops", (int, float)), ("intensity", (int, float)), ("bound", str),
                           ("percent_of_roof", (int, float))]:
            check(isinstance(k.get(field), typ), f"{where}: kernel field {field} missing or mistyped in {k.get('name')}")
        if k["dram_bytes"] <= 0 or k["time_ms"] <= 0:
            problems.append(f"{where}: {k['name']} has no bytes or no time")
            continue
        ai = k["flops"] / k["dram_bytes"]
        check(abs(k["intensity"] - ai) <= 1e-4 * ai + 1e-9, f"{where}: {k['name']} intensity {k['intensity']} != {ai}")
        want = "memory" if ai < peak / bw else "compute"
        check(k["bound"] == want, f"{where}: {k['name']} bound {k['bound']}, expected {want}")
        gflops = k["flops"] / (k["time_ms"] * 1e6)
        if want == "compute":
            pct = 100 * gflops / min(peak, bw * ai)
        else:  # = attained / (bw × intensity), also defined for kernels without FLOPs
            pct = 100 * k["dram_bytes"] / (k["time_ms"] * 1e6) / bw
        check(abs(k["percent_of_roof"] - pct) <= 1e-3 * pct + 1e-3,
              f"{where}: {k['name']} percent_of_roof {k['percent_of_roof']} != {pct:.4g}")
    s = rep.get("summary", {})
    check(abs(s.get("memory_time_share", -1) + s.get("compute_time_share", -1) - 1) < 1e-3,
          f"{where}: time shares do not add up to 1: {s}")


def check_svg(path, where):
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        problems.append(f"{where}: not well-formed XML: {e}")
        return None
    ns = "{http://www.w3.org/2000/svg}"
    check(root.tag == ns + "svg", f"{where}: root element is {root.tag}")
    ids = {e.get("id") for e in root.iter()}
    for i in ("compute-roof", "bandwidth-roof", "legend", "xlabel", "ylabel", "fused", "unfused"):
        check(i in ids, f"{where}: no element with id {i}")
    text = " ".join("".join(e.itertext()) for e in root.iter(ns + "text"))
    for unit in ("GFLOP/s", "FLOP per byte", "GB/s"):
        check(unit in text, f"{where}: no '{unit}' in the labels")
    return root


# A small model for the schema, the plot and the HTML.
with tempfile.TemporaryDirectory() as tmp:
    svg, html = os.path.join(tmp, "r.svg"), os.path.join(tmp, "r.html")
    out = roofline("demo.onnx", "--json", "--svg", svg, "--html", html)
    if out is not None:
        d = json.loads(out)
        m = d.get("machine", {})
        for field, typ in [("peak_gflops", (int, float)), ("dram_gbps", (int, float)), ("threads", int)]:
            check(isinstance(m.get(field), typ), f"machine.{field} missing or mistyped")
        check(m.get("peak_gflops", 0) > 0 and m.get("dram_gbps", 0) > 0, f"machine roof is empty: {m}")
        check_report(d, "demo fused", m)
        check("unfused" in d, "no 'unfused' report")
        if "unfused" in d:
            check_report(d["unfused"], "demo unfused", m)
            check(d["unfused"]["kernel_count"] > d["kernel_count"], "unfused has no more kernels than fused")
            check(d["unfused"]["total_dram_bytes"] > d["total_dram_bytes"], "fusion did not reduce DRAM bytes")
            check(d["unfused"]["total_flops"] == d["total_flops"], "fused and unfused model FLOPs differ")
        root = check_svg(svg, "demo --svg")
        if root is not None and "unfused" in d:
            dots = [c for c in root.iter("{http://www.w3.org/2000/svg}circle") if c.get("class") == "kernel"]
            with_flops = sum(1 for rep in (d, d["unfused"]) for k in rep["kernels"] if k["flops"] > 0)
            check(len(dots) == with_flops, f"{len(dots)} dots for {with_flops} kernels with FLOPs")
        try:
            page = open(html, encoding="utf-8").read()
            check(page.startswith("<!DOCTYPE html>") and "<svg" in page and page.count("<table>") == 2,
                  "--html lacks the doctype, the inline plot or the two tables")
        except OSError as e:
            problems.append(f"--html not written: {e}")

    text = roofline("demo.onnx", "--fused-only")
    if text is not None:
        check("fused: 4 kernels" in text and "unfused:" not in text, "--fused-only text output wrong")
        check("% of roof" in text and "bound" in text, "text output lacks the bound / percent columns")

# The FLOP count against the independent one: torchvision's resnet18 is 1.814 G multiply-adds,
# 3.64 GFLOP at 2 FLOPs each (the bias adds, ReLUs, residual adds and pools are under 0.3 %).
out = roofline("resnet18.onnx", "--json", "--fused-only", "--threads", "1")
if out is not None:
    d = json.loads(out)
    check(abs(d["total_flops"] / 3.64e9 - 1) <= 0.01, f"resnet18 total_flops {d['total_flops']:.4g} not within 1 % of 3.64e9")
    check(d["machine"]["threads"] == 1, "--threads 1 not reflected in machine.threads")
    check_report(d, "resnet18", d["machine"])

# --device opencl (PoCL here): the kernels timed on the device, each one to its completion (no
# kernel of 0 ms), under the opencl target description's roof.
text = roofline("demo.onnx", "--fused-only", "--device", "opencl")
if text is not None:
    check("--device opencl: the opencl target description" in text and "roof peak 10000.0 GFLOP/s" in text,
          "--device opencl: not under the opencl target's roof")
    times = [float(l.split()[3]) for l in text.splitlines() if l[:1].isdigit() and len(l.split()) > 3]
    check(len(times) == 4 and all(t > 0 for t in times), f"--device opencl: kernel times {times}")

r = subprocess.run([kiln, "roofline", os.path.join(model_dir, "demo.onnx"), "--no-fusion", "--fused-only"],
                   capture_output=True, text=True)
check(r.returncode == 1 and "exclude each other" in r.stderr, "--no-fusion --fused-only not refused")

if problems:
    print("roofline CLI: FAILED")
    for p in problems:
        print("  " + p)
    sys.exit(1)
print("roofline CLI: ok")
