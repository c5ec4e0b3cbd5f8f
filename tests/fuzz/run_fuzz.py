#!/usr/bin/python3
"""Differential fuzzing of kiln on random ONNX graphs (gen_graph.py), and replay of stored
reproducers.

    run_fuzz.py [--kiln build/kiln] [--start S] [--count N] [--jobs 2] [--keep DIR] [--no-ort]
                [--known tests/fuzz/known_failures.txt] [--write-known FILE] [--weight FAMILY=W ...]
    run_fuzz.py --replay tests/fuzz/regressions/active.txt [--count N]
                                   (every stored reproducer must pass; with --count, seeds too)
    run_fuzz.py --replay tests/fuzz/regressions/pending.txt --expect-fail [--only NAME --keep DIR]
                                   (says which pending ones pass now and may move to active.txt;
                                   --keep DIR leaves each case there with its kiln commands)

Each seed's graph runs through kiln's reference, fused and --no-fusion paths and ONNX Runtime
(fuzz_check.py says what is compared and how failures are classed). One line per failure:
    FAIL seed=S class[path]: detail | repro: <command>
then a summary with the per-seed cost; exit status 1 on any failure. The JIT cache goes to a
temporary folder for the run (or --jit-cache DIR), so the user's cache is not touched.
"""
import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fuzz_check  # noqa: E402

_state = {}


def _init(args, cache):
    _state["args"], _state["cache"] = args, cache
    _state["ort"] = fuzz_check.OrtWorker(args.ort_python) if args.use_ort else None


def run_seed(seed):
    import gen_graph
    args = _state["args"]
    case = os.path.join(args.work, f"seed_{seed}")
    t0 = time.monotonic()
    try:
        gen_graph.write(seed, case)
    except Exception as e:  # a generator bug is a failure of this test too
        return seed, [fuzz_check.Failure("gen-error", "generator", f"{type(e).__name__}: {e}"[:400])], {}, case, []
    times = {"generate": time.monotonic() - t0}
    notes = []
    failures, t = fuzz_check.check_case(args.kiln, case, _state["ort"], _state["cache"], notes=notes)
    times.update(t)
    if not failures and not args.keep_all:
        shutil.rmtree(case, ignore_errors=True)
    return seed, failures, times, case, notes


def run_stored(entry):
    """A reproducer from a manifest: NAME.onnx and NAME.npz (the inputs) into a case folder."""
    import numpy as np
    name, d, cls = entry
    args = _state["args"]
    case = os.path.join(args.work, name)
    os.makedirs(case, exist_ok=True)
    shutil.copy(os.path.join(d, name + ".onnx"), os.path.join(case, "model.onnx"))
    with np.load(os.path.join(d, name + ".npz")) as z:
        for k in z.files:
            np.save(os.path.join(case, k + ".npy"), z[k])
    notes = []
    failures, times = fuzz_check.check_case(args.kiln, case, _state["ort"], _state["cache"], notes=notes)
    return (name, cls), failures, times, case, notes


def run_item(item):
    kind, what = item
    return (kind,) + (run_stored if kind == "stored" else run_seed)(what)


KNOWN_HEADER = """# Seeds of the ctest's range known to fail, until kiln is fixed: SEED CLASS[PATH] CAUSE.
# A listed failure is reported as known and does not fail the test; anything else does. Regenerate
# with run_fuzz.py --write-known (keeps the causes of seeds already listed), then name new causes
# (tests/fuzz/README.md, triage). The generator changing changes every seed's graph: regenerate.
"""


def read_known(path):
    known = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) >= 2:
                known.setdefault(int(line[0]), {})[line[1]] = " ".join(line[2:]) or "?"
    return known


def read_manifest(path):
    """Lines `NAME  CLASS  what it found`; '#' starts a comment."""
    entries = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                parts = line.split(None, 2)
                entries.append((parts[0], parts[1] if len(parts) > 1 else "", parts[2] if len(parts) > 2 else ""))
    return entries


def repro(args, seed):
    me = os.path.relpath(os.path.abspath(__file__))
    ort = "" if args.use_ort else " --no-ort"
    weights = "".join(f" --weight {w}" for w in args.weight)
    return f"/usr/bin/python3 {me} --kiln {args.kiln} --start {seed} --count 1 --keep /tmp/kiln-fuzz-{seed}{ort}{weights}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep failing cases there")
    ap.add_argument("--keep-all", action="store_true", help="keep passing cases too")
    ap.add_argument("--jit-cache", metavar="DIR", help="XDG_CACHE_HOME for kiln (default: a temporary folder)")
    ap.add_argument("--ort-python", default="python3", help="a Python with onnxruntime (default python3)")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--require-ort", action="store_true", help="fail when onnxruntime is not importable")
    ap.add_argument("--replay", metavar="MANIFEST", action="append", default=[],
                    help="run the reproducers a manifest lists (repeatable)")
    ap.add_argument("--expect-fail", action="store_true", help="with --replay: the listed cases are known to fail")
    ap.add_argument("--only", metavar="NAME", action="append", default=[],
                    help="with --replay: just this reproducer (repeatable)")
    ap.add_argument("--known", metavar="FILE", help="seeds known to fail (SEED CLASS[PATH] CAUSE per line): "
                    "those failures are reported as known, not counted; any other failure still fails")
    ap.add_argument("--write-known", metavar="FILE", help="write this run's failures in --known's format")
    ap.add_argument("--weight", metavar="FAMILY=W", action="append", default=[],
                    help="draw op family FAMILY (gen_*.py's function name, e.g. fam_squeeze_excitation) with "
                    "weight W instead of its default (repeatable): a run biased towards it; its seeds' graphs "
                    "differ from the default run's")
    args = ap.parse_args()
    import gen_ops  # noqa: E402 (the families' weights, inherited by the forked workers)
    for w in args.weight:
        name, _, value = w.partition("=")
        try:
            gen_ops.FAMILY_WEIGHTS[name] = float(value)
        except ValueError:
            sys.exit(f"run_fuzz: --weight {w}: expected FAMILY=WEIGHT")
    args.count_given = "--count" in sys.argv or any(a.startswith("--count=") for a in sys.argv)
    args.kiln = os.path.abspath(args.kiln) if os.path.exists(args.kiln) else args.kiln
    if not os.access(args.kiln, os.X_OK):
        sys.exit(f"run_fuzz: no kiln executable at {args.kiln}")
    args.use_ort = not args.no_ort and fuzz_check.ort_available(args.ort_python)
    if not args.use_ort and not args.no_ort:
        msg = f"onnxruntime is not importable by {args.ort_python}: kiln's reference is not cross-checked"
        if args.require_ort:
            sys.exit("run_fuzz: " + msg)
        print("run_fuzz: note: " + msg)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        args.work = os.path.abspath(args.keep)
    else:
        args.work = tempfile.mkdtemp(prefix="kiln-fuzz-")
    cache = os.path.abspath(args.jit_cache) if args.jit_cache else tempfile.mkdtemp(prefix="kiln-fuzz-jit-")

    known = read_known(args.known) if args.known else {}
    # Stored reproducers and seeds go through one pool: (kind, what) items.
    items = []
    for mpath in args.replay:
        for name, cls, _ in read_manifest(mpath):
            if args.only and name not in args.only:
                continue
            items.append(("stored", (name, os.path.dirname(os.path.abspath(mpath)), cls)))
    if not args.replay or args.count_given:
        items += [("seed", s) for s in range(args.start, args.start + args.count)]

    t0 = time.monotonic()
    n_fail, n_known, n_fixed, results, totals, found, n_ill = 0, 0, [], 0, {}, [], 0
    ctx = mp.get_context("fork")
    with ctx.Pool(max(1, args.jobs), initializer=_init, initargs=(args, cache)) as pool:
        for kind, ident, failures, times, case, notes in pool.imap(run_item, items, chunksize=1):
            results += 1
            n_ill += bool(notes)
            for note in notes:
                print(f"note {kind}={ident[0] if kind == 'stored' else ident} {note}", flush=True)
            for k, v in times.items():
                totals[k] = totals.get(k, 0.0) + v
            if kind == "stored":
                n_fail += report_replay(args, ident, failures, case)
                if failures and args.keep:
                    print_commands(args, case, cache)
                continue
            found += [(ident, f) for f in failures]
            expected = known.get(ident, {})
            new = [f for f in failures if f"{f.cls}[{f.path}]" not in expected]
            for f in failures:
                tag = "FAIL" if f in new else f"known ({expected[f'{f.cls}[{f.path}]']})"
                print(f"{tag} seed={ident} {f.cls}[{f.path}]: {f.detail} | repro: {repro(args, ident)}", flush=True)
            if expected and not failures:
                n_fixed.append(ident)
            n_known += bool(failures) and not new
            n_fail += bool(new)
            if failures and args.keep:
                print_commands(args, case, cache)
    wall = time.monotonic() - t0
    per = ", ".join(f"{k} {v / max(results, 1) * 1000:.0f} ms" for k, v in totals.items())
    if n_fixed:
        print(f"run_fuzz: seeds listed in {args.known} that pass now (remove them): "
              + " ".join(map(str, n_fixed)))
    if args.write_known:
        with open(args.write_known, "w") as f:
            f.write(KNOWN_HEADER)
            for seed, fl in found:
                f.write(f"{seed} {fl.cls}[{fl.path}] {known.get(seed, {}).get(f'{fl.cls}[{fl.path}]', '?')}\n")
    n_seeds = sum(1 for k, _ in items if k == "seed")
    what = f"{len(items) - n_seeds} reproducers + {n_seeds} seeds" if args.replay else f"{n_seeds} seeds"
    if n_seeds:
        what += f" [{args.start}, {args.start + args.count})"
    known_note = f" ({n_known} more fail only as {args.known} expects)" if args.known else ""
    ill_note = f", {n_ill} ill-conditioned (differences within the conditioning bound, fuzz_check.py)" if n_ill else ""
    print(f"run_fuzz: {what}, {n_fail} failing{known_note}{ill_note}; {wall:.1f} s wall with {args.jobs} jobs "
          f"({wall / max(results, 1) * args.jobs:.2f} s per case per job; mean per case: {per})")
    if not args.jit_cache:
        shutil.rmtree(cache, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)
    elif n_fail:
        print(f"run_fuzz: failing cases kept under {args.work}")
    sys.exit(1 if n_fail else 0)


def print_commands(args, case, cache):
    if not os.path.exists(os.path.join(case, "model.onnx")):  # the generator failed: nothing to run
        return
    inputs, _ = fuzz_check.case_inputs(case)
    for mode in fuzz_check.MODES:
        cmd = fuzz_check.kiln_command(args.kiln, case, inputs, os.path.join(case, mode), mode)
        print(f"    {mode}: XDG_CACHE_HOME={cache} " + " ".join(cmd))


def report_replay(args, ident, failures, case):
    """Active reproducers must pass; pending ones are expected to fail (a pass means: move it)."""
    name, cls = ident
    if args.expect_fail:
        if failures:
            got = [f"{f.cls}[{f.path}]" for f in failures]
            how = "as listed" if cls in got else f"listed as {cls}, now"
            print(f"still failing {name} ({how}): " + "; ".join(f"{f.cls}[{f.path}]: {f.detail[:200]}" for f in failures))
            return 0
        print(f"PASSES NOW {name}: move it from pending.txt to active.txt")
        return 0
    for f in failures:
        print(f"FAIL {name} {f.cls}[{f.path}]: {f.detail} | case: {case}")
    if not failures:
        print(f"ok   {name}")
    return bool(failures)


if __name__ == "__main__":
    main()
