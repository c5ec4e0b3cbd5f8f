"""One case through kiln three ways and ONNX Runtime, classified (shared by run_fuzz.py and
minimize.py).

A case is a folder with model.onnx and one <input name>.npy per graph input. check_case runs
    reference   kiln run --reference                 (the interpreter, kiln's oracle)
    fused       kiln run           (KILN_PROFILE=1:  stderr says per kernel "gen" or "lib")
    no-fusion   kiln run --no-fusion
and ONNX Runtime (ort_worker.py), and returns a list of Failure. Classes:
    crash            killed by a signal                    internal-error  exit 70
    timeout          ran past the limit                    compile-error   the C compiler failed
    user-error       exit 1 on a model the generator believes valid (generator or kiln is wrong)
    library-kernel   a compiled run left a kernel to the reference kernels ("lib", not a view)
    mismatch         an output differs from the reference beyond the tolerance (or dtype/shape)
    ort-mismatch     kiln's reference differs from ONNX Runtime (the path named is "reference";
                     when the reference failed, the compiled paths are compared with ORT instead)
    ort-error        ONNX Runtime refused the model (the generator made something unusual)
Failure.key (class, path and a signature of the message with names and numbers blanked) is what
the minimiser keeps constant while it shrinks a case.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np

RTOL = 1e-4    # of the output's max |reference|: kiln's numerics contract
ATOL = 1e-6    # so outputs that are all (nearly) zero do not divide by nothing
ORT_RTOL = 1e-3  # ONNX Runtime is another implementation (MLAS sums in other orders, with FMA):
                 # kiln's 1e-4 contract binds kiln, not it; reference bugs are gross
TIMEOUT_S = 120
# The conditioning bound (see conditioning()): when an output differs beyond the tolerance, the
# reference is run again on inputs perturbed by a relative PERTURB (8 float32 ulps, random signs);
# an element whose difference stays within COND_FACTOR times the change that perturbation makes
# is ill-conditioned (cancellation, a LayerNorm over two elements, a comparison on a boundary) —
# reported as a note, not as a failure: every correct float32 implementation differs there.
PERTURB = 2.0 ** -20
COND_FACTOR = 2.0
COND_RUNS = 2
# Accumulation: every kernel within the contract on its own inputs (`kiln run --check`)
# and the end-to-end difference within ACCUM_FACTOR times the tolerance is rounding that later
# kernels amplified (a LayerNorm over two elements after a MatMul: each kernel 5e-7, the output
# 1.2e-4). A wrong index or a clobbered buffer differs by O(1), far beyond that.
ACCUM_FACTOR = 10.0


class Failure:
    def __init__(self, cls, path, detail, signature="", more_signatures=()):
        self.cls, self.path, self.detail, self.signature = cls, path, detail, signature
        self.more = list(more_signatures)  # a library-kernel failure: the other reasons' signatures

    def matches(self, key):
        return key == self.key or key in (f"{self.cls}:{self.path}:{s}" for s in self.more)

    @property
    def key(self):
        return f"{self.cls}:{self.path}" + (f":{self.signature}" if self.signature else "")

    def __repr__(self):
        return f"{self.cls}[{self.path}] {self.detail}"


def signature(msg):
    """A message with what varies between graphs blanked: quoted names, numbers, shapes."""
    msg = re.sub(r"'[^']*'", "''", msg)
    msg = re.sub(r"\[[0-9, x]*\]", "[]", msg)
    msg = re.sub(r"[0-9]+(\.[0-9]+)?(e-?[0-9]+)?", "N", msg)
    msg = re.sub(r"/[^ :]+", "PATH", msg)
    return " ".join(msg.split())[:160]


class OrtWorker:
    """ort_worker.py in a child process under the Python that has onnxruntime."""

    def __init__(self, python):
        here = os.path.dirname(os.path.abspath(__file__))
        self.p = subprocess.Popen([python, os.path.join(here, "ort_worker.py")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def run(self, model, inputs, outdir):
        self.p.stdin.write(json.dumps({"model": model, "inputs": inputs, "outdir": outdir}) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            return {"ok": False, "error": "ort_worker died"}
        return json.loads(line)

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=10)


def ort_available(python):
    try:
        return subprocess.run([python, "-c", "import onnxruntime"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def case_inputs(case):
    import onnx
    m = onnx.load(os.path.join(case, "model.onnx"), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    ins = [i.name for i in m.graph.input if i.name not in inits]
    outs = [o.name for o in m.graph.output]
    return {n: os.path.join(case, n + ".npy") for n in ins}, outs


def topk_pairs(case):
    """{TopK indices output: (its values output, axis)} for TopK nodes with both outputs in the graph's."""
    import onnx
    m = onnx.load(os.path.join(case, "model.onnx"), load_external_data=False)
    outs = {o.name for o in m.graph.output}
    pairs = {}
    for node in m.graph.node:
        if node.op_type == "TopK" and len(node.output) == 2 and set(node.output) <= outs:
            axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
            pairs[node.output[1]] = (node.output[0], axis)
    return pairs


def tie_mask(got_idx, ref_idx, ref_val, axis, rtol, atol):
    """Where TopK's indices differ from the reference's at a near tie: the index picked is the
    reference's at another position of the same row whose value is within the tolerance of this
    position's (two values 1 ulp apart, sorted the other way)."""
    gi, ri, rv = (np.moveaxis(a, axis, -1) for a in (got_idx, ref_idx, ref_val))
    mask = np.zeros(gi.shape, bool)
    fin = np.isfinite(rv)
    tol = rtol * (float(np.abs(rv[fin]).max()) if fin.any() else 0.0) + atol
    for at in np.argwhere(gi != ri):
        row, pos = tuple(at[:-1]), at[-1]
        same = np.flatnonzero(ri[row] == gi[row + (pos,)])
        mask[tuple(at)] = bool(same.size) and abs(float(rv[row + (same[0],)]) - float(rv[row + (pos,)])) <= tol
    return np.moveaxis(mask, -1, axis)


def kiln_command(kiln, case, inputs, outdir, mode):
    cmd = [kiln, "run", os.path.join(case, "model.onnx")]
    for n, p in inputs.items():
        cmd += ["--input", f"{n}={p}"]
    cmd += ["--output-dir", outdir]
    if mode == "reference":
        cmd.append("--reference")
    elif mode == "no-fusion":
        cmd.append("--no-fusion")
    return cmd


def run_kiln(cmd, env):
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        return r.returncode, r.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return "timeout", "", time.monotonic() - t0


def classify_exit(path, rc, stderr, cmd):
    """A Failure for a kiln run that did not succeed, or None."""
    if rc == 0:
        return None
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("kiln profile:")]
    first = lines[0] if lines else ""
    first = first[len("kiln: "):] if first.startswith("kiln: ") else first
    if rc == "timeout":
        return Failure("timeout", path, f"no result after {TIMEOUT_S} s")
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        return Failure("crash", path, f"killed by {name}: {first[:300]}", name)
    if rc == 70:
        return Failure("internal-error", path, first[:400], signature(first))
    if "C compiler failed" in stderr:
        return Failure("compile-error", path, first[:400])
    if rc == 1:
        return Failure("user-error", path, first[:400], signature(first))
    return Failure("bad-exit", path, f"exit {rc}: {first[:300]}", str(rc))


def library_kernels(stderr):
    """Names of kernels a compiled run left to the reference kernels ("lib"; views print "view",
    Concats built in place "in-place")."""
    out = []
    for ln in stderr.splitlines():
        m = re.match(r"kiln profile: (\S+)\s+(gen|lib|view|in-place)\s", ln)
        if m and m.group(2) == "lib":
            out.append(m.group(1))
    return out


def library_reasons(kiln, case, inputs, mode, env, tmp):
    """`kiln run --check` names the reason for each library kernel: the signature of the class."""
    cmd = kiln_command(kiln, case, inputs, tmp, mode) + ["--check"]
    _, stderr, _ = run_kiln(cmd, env)
    reasons = re.findall(r"\[library\]: max rel diff \S+ \((.*)\)$", stderr, re.M)
    return sorted(set(reasons))


def compare(got_path, ref_path, rtol, atol, allow=None):
    """None when the two .npy files agree, else a one-line description. `allow` (an array of the
    output's shape) widens the tolerance per element: the conditioning bound."""
    if not os.path.exists(got_path):
        return "output file missing"
    got, ref = np.load(got_path), np.load(ref_path)
    if got.dtype != ref.dtype or got.shape != ref.shape:
        return f"got {got.dtype}{list(got.shape)}, expected {ref.dtype}{list(ref.shape)}"
    if got.dtype.kind not in "fc":
        differ = got != ref
        if allow is not None:  # an index the perturbed runs moved too (a near tie in TopK/ArgMax)
            differ &= ~(allow > 0)
        bad = int(np.count_nonzero(differ))
        return f"{bad} of {ref.size} elements differ (exact compare)" if bad else None
    g, r = got.astype(np.float64), ref.astype(np.float64)
    nan_g, nan_r = np.isnan(g), np.isnan(r)
    if (nan_g != nan_r).any():
        return f"NaN in {int(nan_g.sum())} elements vs {int(nan_r.sum())} in the reference"
    inf_r = np.isinf(r)
    if (np.isinf(g) != inf_r).any() or (g[inf_r] != r[inf_r]).any():
        return "infinities differ"
    fin = ~(nan_r | inf_r)
    if not fin.any():
        return None
    diff = np.abs(g[fin] - r[fin])
    mag = float(np.abs(r[fin]).max())
    worst = float(diff.max())
    if worst <= rtol * mag + atol:
        return None
    if allow is not None and (diff <= rtol * mag + atol + COND_FACTOR * allow[fin]).all():
        return None
    at = np.unravel_index(int(np.argmax(np.where(fin, np.abs(g - r), -1))), r.shape)
    return (f"max|d|={worst:.3g} ({worst / mag if mag else float('inf'):.3g} of max|ref|={mag:.3g}) "
            f"at {list(int(i) for i in at)}: {g[at]:.6g} vs {r[at]:.6g}")


def conditioning(kiln, case, inputs, outs, ref_dir, env, work):
    """Per output, the elementwise largest change of the reference output over COND_RUNS runs
    with every float input multiplied by 1 +- PERTURB (random signs, seeded): how far rounding of
    the size float32 arithmetic makes moves this graph's result. None when a perturbed run fails."""
    import onnx
    from onnx import numpy_helper
    rng = np.random.RandomState(20261201)

    def perturbed(x):
        if x.dtype.kind != "f" or x.size == 0:
            return x
        signs = rng.choice([-1.0, 1.0], size=x.shape)
        return (x.astype(np.float64) * (1.0 + PERTURB * signs)).astype(x.dtype)

    spread = {}
    for k in range(COND_RUNS):
        d = os.path.join(work, f"perturbed{k}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        pin = {}
        for n, p in inputs.items():
            pin[n] = os.path.join(d, n + ".npy")
            np.save(pin[n], perturbed(np.load(p)))
        # The weights too (initializers and Constant nodes): an output may depend on them alone.
        # Not Resize's scales and roi, which decide shapes.
        m = onnx.load(os.path.join(case, "model.onnx"))
        shape_like = {i for node in m.graph.node if node.op_type in ("Resize", "Upsample") for i in node.input[1:]}
        for t in m.graph.initializer:
            if t.name not in shape_like:
                t.CopyFrom(numpy_helper.from_array(perturbed(numpy_helper.to_array(t)), t.name))
        for node in m.graph.node:
            if node.op_type == "Constant" and node.output[0] not in shape_like:
                for a in node.attribute:
                    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                        a.t.CopyFrom(numpy_helper.from_array(perturbed(numpy_helper.to_array(a.t)), a.t.name))
        onnx.save(m, os.path.join(d, "model.onnx"))
        outdir = os.path.join(d, "out")
        rc, _, _ = run_kiln(kiln_command(kiln, d, pin, outdir, "reference"), env)
        if rc != 0:
            return None
        for n in outs:
            a = np.load(os.path.join(outdir, n + ".npy"))
            r = np.load(os.path.join(ref_dir, n + ".npy"))
            if a.shape != r.shape:
                continue
            if a.dtype.kind not in "fc":
                # An integer output computed from floats (TopK's and ArgMax's indices): an element
                # the perturbation changes sits on a near tie, where every correct float32
                # implementation may pick either index.
                ch = np.where(a != r, np.inf, 0.0)
                spread[n] = ch if n not in spread else np.maximum(spread[n], ch)
                continue
            a64, r64 = np.array(a, np.float64), np.array(r, np.float64)  # 0-d outputs stay arrays
            with np.errstate(invalid="ignore"):
                ch = np.array(np.abs(a64 - r64))
            # An element that rounding-sized changes turn into NaN or inf sits on a singularity
            # (a Sqrt or Log of a cancelling difference): no finite value is better than another.
            ch[~np.isfinite(a64) & np.isfinite(r64)] = np.inf
            ch[~np.isfinite(r64)] = 0.0
            spread[n] = ch if n not in spread else np.maximum(spread[n], ch)
    return spread


MODES = ("reference", "fused", "no-fusion")


def check_case(kiln, case, ort=None, cache_dir=None, work=None, modes=MODES, notes=None):
    """Runs the case every way (or the `modes` given; ONNX Runtime when `ort` is a worker);
    returns (failures, seconds per path). Differences within the conditioning bound only are
    appended to `notes` (a list) as text instead of being failures."""
    work = work or case
    inputs, outs = case_inputs(case)
    env = dict(os.environ, KILN_PROFILE="1", GOMP_SPINCOUNT="1000")
    if cache_dir:
        env["XDG_CACHE_HOME"] = cache_dir
    failures, times, ok = [], {}, {}
    for mode in modes:
        outdir = os.path.join(work, mode)
        shutil.rmtree(outdir, ignore_errors=True)  # never compare with a previous run's files
        cmd = kiln_command(kiln, case, inputs, outdir, mode)
        rc, stderr, times[mode] = run_kiln(cmd, env)
        f = classify_exit(mode, rc, stderr, cmd)
        if f:
            failures.append(f)
            continue
        ok[mode] = outdir
        lib = library_kernels(stderr) if mode != "reference" else []
        if lib:
            reasons = library_reasons(kiln, case, inputs, mode, env, os.path.join(work, mode + "-check"))
            failures.append(Failure("library-kernel", mode, f"{len(lib)} kernel(s) {', '.join(lib[:3])}: "
                                    + "; ".join(reasons)[:400], signature(reasons[0]) if reasons else "",
                                    [signature(r) for r in reasons[1:]]))
    oracle = None
    if ort is not None:
        t0 = time.monotonic()
        odir = os.path.join(work, "ort")
        shutil.rmtree(odir, ignore_errors=True)
        reply = ort.run(os.path.join(case, "model.onnx"), inputs, odir)
        times["ort"] = time.monotonic() - t0
        if not reply["ok"]:
            failures.append(Failure("ort-error", "ort", reply["error"][:400], signature(reply["error"][:120])))
        else:
            # ORT writes by position; give the files the graph's output names.
            for i, n in enumerate(outs):
                os.replace(os.path.join(odir, f"{i}.npy"), os.path.join(odir, n + ".npy"))
            oracle = odir
    cond = {}  # computed on the first difference beyond the tolerance
    pairs = topk_pairs(case)

    def differences(got_dir, ref_dir, rtol, what):
        bad = [(n, d) for n in outs if (d := compare(os.path.join(got_dir, n + ".npy"), os.path.join(ref_dir, n + ".npy"), rtol, ATOL))]
        if not bad or "reference" not in ok:
            return [f"{n}: {d}" for n, d in bad]
        if "spread" not in cond:
            t0 = time.monotonic()
            cond["spread"] = conditioning(kiln, case, inputs, outs, ok["reference"], env, work) or {}
            times["conditioning"] = time.monotonic() - t0
        spread = cond["spread"]
        def explained(n):
            got, want = os.path.join(got_dir, n + ".npy"), os.path.join(ref_dir, n + ".npy")
            allow = spread.get(n)
            if n in pairs and os.path.exists(got):
                vals, axis = pairs[n]
                ties = tie_mask(np.load(got), np.load(want), np.load(os.path.join(ref_dir, vals + ".npy")), axis, rtol, ATOL)
                allow = np.where(ties, np.inf, 0.0) if allow is None else np.maximum(allow, np.where(ties, np.inf, 0.0))
            if allow is not None and compare(got, want, rtol, ATOL, allow) is None:
                return True
            if what not in ("fused", "no-fusion") or compare(got, want, ACCUM_FACTOR * rtol, ATOL, spread.get(n)):
                return False
            if what not in cond:
                rc, _, _ = run_kiln(kiln_command(kiln, case, inputs, os.path.join(work, what + "-check"), what) + ["--check"], env)
                cond[what] = rc == 0
            return cond[what]

        still = [f"{n}: {d}" for n, d in bad if not explained(n)]
        if notes is not None and len(still) < len(bad):
            notes.append(f"ill-conditioned {what}: " + "; ".join(f"{n}: {d}" for n, d in bad)[:300])
        return still

    if "reference" in ok:
        ref = ok["reference"]
        if oracle:
            bad = differences(ref, oracle, ORT_RTOL, "reference vs ONNX Runtime")
            if bad:
                failures.append(Failure("ort-mismatch", "reference", "; ".join(bad)[:600]))
    else:
        ref = oracle  # the reference failed: the compiled paths still get an oracle
    if ref:
        for mode in ("fused", "no-fusion"):
            if mode not in ok:
                continue
            bad = differences(ok[mode], ref, RTOL, mode) if ref is not oracle else \
                [f"{n}: {d}" for n in outs if (d := compare(os.path.join(ok[mode], n + ".npy"),
                                                            os.path.join(ref, n + ".npy"), RTOL, ATOL))]
            if bad:
                vs = "" if ref is not oracle else " (vs ONNX Runtime)"
                failures.append(Failure("mismatch", mode, "; ".join(bad)[:600] + vs))
    return failures, times
