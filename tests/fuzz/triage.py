#!/usr/bin/python3
"""Groups the failures of a fuzz run into candidate root causes by minimising them.

    triage.py RUN_LOG KEEP_DIR [--kiln build/kiln] [--per-key 6] [--jobs 2] [--json OUT] [--classes A,B]

RUN_LOG is run_fuzz.py's output, KEEP_DIR its --keep folder. Failures are first grouped by key
(class, path, message signature); for each key up to --per-key seeds are minimised
(minimize.py) and the minimal graphs' op sequences printed, so one key that hides several causes
shows as several sequences. Prints, per key: the number of seeds, the seeds, and per minimised
seed its op sequence; --json writes the same as a list of objects.
"""
import argparse
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fuzz_check  # noqa: E402


def keys_of(log):
    """(seed, class, path, detail) per FAIL/known line."""
    out = []
    pat = re.compile(r"^(?:FAIL|known \([^)]*\)) seed=(\d+) ([a-z-]+)\[([a-z-]+)\]: (.*?) \| repro:")
    with open(log) as f:
        for line in f:
            m = pat.match(line)
            if m:
                out.append((int(m.group(1)), m.group(2), m.group(3), m.group(4)))
    return out


def key_for(cls, path, detail):
    """The minimiser's key for a logged failure (the signature as fuzz_check computes it)."""
    sig = ""
    if cls in ("internal-error", "user-error"):
        sig = fuzz_check.signature(detail)
    elif cls == "library-kernel":
        reason = detail.split(": ", 1)[1].split("; ")[0] if ": " in detail else ""
        sig = fuzz_check.signature(reason)
    elif cls == "crash":
        sig = detail.split(":")[0].replace("killed by ", "")
    elif cls == "ort-error":
        sig = fuzz_check.signature(detail[:120])
    return f"{cls}:{path}" + (f":{sig}" if sig else "")


def minimise(job):
    kiln, case, key = job
    r = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "minimize.py"), case, "--key", key, "--kiln", kiln,
                        "--max-trials", "150"], capture_output=True, text=True)
    ops = re.findall(r"^   (\S+) \[", r.stdout, re.M)
    return case, key, [o for o in ops if o != "Constant"], r.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("keep")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--per-key", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--classes", help="comma-separated classes to triage (default: all)")
    args = ap.parse_args()
    groups = {}
    only = set(args.classes.split(",")) if args.classes else None
    for seed, cls, path, detail in keys_of(args.log):
        if only and cls not in only:
            continue
        groups.setdefault(key_for(cls, path, detail), []).append((seed, detail))
    jobs = []
    for key, seeds in groups.items():
        for seed, _ in seeds[:args.per_key]:
            jobs.append((os.path.abspath(args.kiln), os.path.join(args.keep, f"seed_{seed}"), key))
    with mp.get_context("fork").Pool(args.jobs) as pool:
        results = pool.map(minimise, jobs, chunksize=1)
    mins = {}
    for case, key, ops, rc in results:
        mins.setdefault(key, []).append((int(case.rsplit("_", 1)[1]), ops, rc))
    report = []
    for key, seeds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{key}: {len(seeds)} seeds: {' '.join(str(s) for s, _ in seeds)}")
        print(f"  e.g. seed {seeds[0][0]}: {seeds[0][1][:300]}")
        for seed, ops, rc in mins.get(key, []):
            print(f"  seed {seed} minimal: {' -> '.join(ops) if rc == 0 else '(did not reproduce)'}")
        report.append({"key": key, "seeds": [s for s, _ in seeds], "example": seeds[0][1],
                       "minimal": {str(s): ops for s, ops, rc in mins.get(key, []) if rc == 0}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
