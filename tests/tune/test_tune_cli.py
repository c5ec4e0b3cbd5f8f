#!/usr/bin/python3
"""`kiln tune` end to end on the demo model (no timing assertions: the machine is shared).

- a 5 s budget is respected by the schedule search (the search reports its wall time; one batch may overrun the share);
- the records file is JSON lines of schema 1, one per searched kernel; a second run skips them all;
- a corrupted line and a foreign machine's record are ignored with one warning line each;
- a deliberately non-default record set (every recorded kernel: mr 3, nr 48, kc 64, serial) stays
  within the tolerance of the reference (`kiln run --check`), and `kiln explain` lists the kernels;
- the summary says how many candidates were measured of those proposed (the schedule model's
  filter measures at most what was proposed);
- --no-records turns the records off; --merge combines two files; a bad --budget or --compile-jobs
  and an unreadable records file are one error line and a non-zero exit, leaving no file behind.

Usage: test_tune_cli.py KILN MODELS_DIR
"""
import json
import os
import re
import subprocess
import tempfile

from cli_check import MODELS, check, finish, kiln

MODEL = os.path.join(MODELS, "demo.onnx")

tmp = tempfile.mkdtemp(prefix="kiln_tune_test_")
rec = os.path.join(tmp, "records.jsonl")

# The schedule search alone (--no-fusion-search): the fusion decisions have their own test
# (test_fusion_search_cli.py) and would change the plan whose kernels share this budget.
r = kiln("tune", MODEL, "--budget", "5s", "--threads", "1", "--records", rec, "--no-fusion-search")
check(r.returncode == 0, f"tune exited {r.returncode}: {r.stderr.strip()[-400:]}")
m = re.search(r"search: ([0-9.]+) s of the 5 s budget; (\d+) kernels searched", r.stdout)
check(m is not None, f"no search summary in: {r.stdout}")
if m:
    # The budget bounds the search; a batch is started only when its predicted cost fits, and a
    # prediction can be short by one batch (a compile of a second or two on a loaded machine).
    check(float(m.group(1)) <= 5 + 4, f"search took {m.group(1)} s of a 5 s budget")
    check(int(m.group(2)) >= 1, "no kernel searched in 5 s")
check("whole model" in r.stdout, f"no whole-model line: {r.stdout}")
mc = re.search(r"candidates: (\d+) measured of (\d+) proposed \(schedule model filter", r.stdout)
check(mc is not None and 1 <= int(mc.group(1)) <= int(mc.group(2)), f"no or a wrong candidates line: {r.stdout}")
lines = open(rec).read().splitlines() if os.path.exists(rec) else []
check(len(lines) >= 1, "no records written")
records = [json.loads(l) for l in lines]
for x in records:
    check(x["schema"] == 1 and x["threads"] == 1 and x["signature"] and "s:contraction.mr" in x, f"record: {x}")

# Resume: everything searched is recorded, so nothing is searched again.
r2 = kiln("tune", MODEL, "--budget", "5s", "--threads", "1", "--records", rec, "--no-fusion-search")
check(r2.returncode == 0, f"second tune exited {r2.returncode}: {r2.stderr.strip()[-400:]}")
m2 = re.search(r"(\d+) kernels searched, (\d+) from the records", r2.stdout)
check(m2 is not None and int(m2.group(2)) == len(records), f"second run did not resume: {r2.stdout}")

# A deliberately non-default record set, plus a corrupted line and a record of another machine.
odd = []
for x in records:
    y = dict(x, improved=True, tuned_ms=x["default_ms"] / 2)
    y.update({"s:contraction.mr": 3, "s:contraction.nr": 48, "s:contraction.kc": 64, "s:parallel_min_work": 1 << 40,
              "s:unroll": 1})
    odd.append(y)
foreign = dict(odd[0], cpu="Some Other CPU 9000") if odd else {}
oddf = os.path.join(tmp, "odd.jsonl")
with open(oddf, "w") as f:
    for y in odd:
        f.write(json.dumps(y) + "\n")
    f.write('{"schema": 1, "signature": \n')       # corrupted
    f.write(json.dumps(foreign) + "\n")             # another machine
    f.write(json.dumps(dict(odd[0], schema=99)) + "\n")  # another schema
out = os.path.join(tmp, "out")
inp = os.path.join(MODELS, "demo.input.npy")
r = kiln("run", MODEL, "--input", f"input={inp}", "--output-dir", out, "--threads", "1", "--records", oddf, "--check")
check(r.returncode == 0, f"run --check with odd records exited {r.returncode}: {r.stderr.strip()[-600:]}")
warn = [l for l in r.stderr.splitlines() if l.startswith("kiln: warning:")]
check(any("not kiln tune records" in l for l in warn), f"no warning for the corrupted lines: {warn}")
check(any("another machine" in l for l in warn), f"no warning for the foreign record: {warn}")
check(len([l for l in warn if "odd.jsonl" in l]) == 2, f"expected one warning per kind: {warn}")
check("refused" not in r.stderr, f"a tuned schedule was refused: {r.stderr}")
r = kiln("explain", MODEL, "--threads", "1", "--records", oddf)
tuned = [l for l in r.stdout.splitlines() if "contraction.mr=3" in l]
check(r.returncode == 0 and len(tuned) == len(odd), f"explain lists {len(tuned)} tuned kernels, want {len(odd)}: {r.stdout[-600:]}")
r = kiln("explain", MODEL, "--threads", "1", "--records", oddf, "--no-records")
check(r.returncode != 0 and "choose one" in r.stderr, "--records with --no-records accepted")
r = kiln("explain", MODEL, "--threads", "1", "--no-records")
check("tuned schedules: none" in r.stdout, f"--no-records still tuned: {r.stdout[-300:]}")

# Merge: the two files' records together, one per key.
merged = os.path.join(tmp, "merged.jsonl")
r = kiln("tune", "--merge", rec, oddf, "-o", merged)
check(r.returncode == 0, f"merge exited {r.returncode}: {r.stderr}")
if r.returncode == 0:
    ml = [json.loads(l) for l in open(merged).read().splitlines()]
    # Per (signature, machine): this machine's kernels once each (the second run may have added
    # kernels the first one's budget did not reach), plus the foreign record.
    now = len(open(rec).read().splitlines())
    check(len(ml) == now + 1, f"merged {len(ml)} records, want {now + 1}")

# Bad input: one line, non-zero exit, nothing written.
for budget in ("10x", "0", "-3s", "", "1m30"):
    bad = os.path.join(tmp, "bad.jsonl")
    r = kiln("tune", MODEL, "--budget", budget, "--records", bad)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "--budget" in r.stderr,
          f"--budget {budget!r}: rc {r.returncode}, {r.stderr.strip()}")
    check(not os.path.exists(bad), f"--budget {budget!r} wrote a records file")
for jobs in ("0", "x", "-1"):
    bad = os.path.join(tmp, "bad.jsonl")
    r = kiln("tune", MODEL, "--compile-jobs", jobs, "--records", bad)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "--compile-jobs" in r.stderr,
          f"--compile-jobs {jobs!r}: rc {r.returncode}, {r.stderr.strip()}")
    check(not os.path.exists(bad), f"--compile-jobs {jobs!r} wrote a records file")
unreadable = os.path.join(tmp, "dir.jsonl")
os.mkdir(unreadable)
r = kiln("tune", MODEL, "--budget", "5s", "--records", unreadable)
check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, f"unreadable records: {r.returncode} {r.stderr}")

subprocess.run(["rm", "-rf", tmp])
finish("test_tune_cli")
