#!/usr/bin/python3
"""Replays the importer fuzzer's findings (tests/fuzz_import/regressions/*.onnx) through the CLI.

Usage: replay.py KILN

Each file crashed kiln, or made it report a user mistake as an internal error, before its fix.
`kiln explain` (import, passes, partition: what the fuzzer runs) must now exit 0, or exit 1 with
exactly one "kiln: error:" line; a signal, exit 70 or a timeout fails. An empty folder fails too.
"""
import glob
import os
import subprocess
import sys

KILN = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
files = sorted(glob.glob(os.path.join(HERE, "regressions", "*.onnx")))
if not files:
    sys.exit("replay: no regression files")
failures = []
for f in files:
    name = os.path.basename(f)
    try:
        r = subprocess.run([KILN, "explain", f], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME", "/nonexistent")))
    except subprocess.TimeoutExpired:
        failures.append(f"{name}: timed out")
        continue
    lines = r.stderr.strip().splitlines()
    if r.returncode < 0 or r.returncode > 128:
        failures.append(f"{name}: killed by a signal ({r.returncode})")
    elif r.returncode not in (0, 1):
        failures.append(f"{name}: exit {r.returncode}: {r.stderr.strip()[:300]}")
    elif r.returncode == 1 and (len(lines) != 1 or not lines[0].startswith("kiln: error: ")):
        failures.append(f"{name}: not one 'kiln: error:' line: {r.stderr.strip()[:300]}")
    else:
        print(f"ok   {name}: {(lines or ['exit 0'])[-1][:160]}")
for f in failures:
    print("FAILED " + f)
sys.exit(1 if failures else 0)
