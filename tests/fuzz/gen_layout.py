"""Layout and indexing op families for gen_graph.py: Transpose, Reshape, Flatten, Squeeze,
Unsqueeze, Concat, Split, Slice (negative steps, clamped bounds), Pad (constant/reflect/edge),
Gather (constant indices), Expand, Tile, Resize (nearest/linear, scales/sizes, every coordinate
mode). These move values and keep their range, so `mag` and `lb` pass through (Pad's constant
and Resize's linear blend aside)."""
import math

import numpy as np

import gen_ops as ops
from gen_graph import MAX_ELEMS, Skip, Val, numel

INT64_MAX = 2 ** 63 - 1


def fam_transpose(b):
    x = b.pick(lambda v: v.rank >= 2)
    perm = list(range(x.rank))
    while perm == sorted(perm):
        perm = [int(p) for p in b.r.permutation(x.rank)]
    if perm == list(reversed(range(x.rank))) and b.chance(0.5):
        return b.op1("Transpose", [x], tuple(reversed(x.shape)), x.mag, x.lb)  # default perm
    return b.op1("Transpose", [x], tuple(x.shape[p] for p in perm), x.mag, x.lb, perm=perm)


def factor(n):
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def fam_reshape(b):
    x = b.pick(lambda v: v.rank >= 1)
    rank = b.randint(1, 5)
    dims = [1] * rank
    for p in factor(numel(x.shape)):
        dims[b.randint(0, rank - 1)] *= p
    spec = list(dims)
    if b.chance(0.4):
        spec[b.randint(0, rank - 1)] = -1
    for i in range(min(rank, x.rank)):
        if spec[i] == x.shape[i] and b.chance(0.3):
            spec[i] = 0  # copy the input's dim (allowzero = 0)
    return b.op1("Reshape", [x, b.ints(spec, "shape")], tuple(dims), x.mag, x.lb)


def flatten(b, x, axis):
    s = x.shape
    a = axis + x.rank if axis < 0 else axis
    attrs = {"axis": axis} if axis != 1 or b.chance(0.3) else {}
    return b.op1("Flatten", [x], (numel(s[:a]), numel(s[a:])), x.mag, x.lb, **attrs)


def fam_flatten(b):
    x = b.pick(lambda v: v.rank >= 1)
    return flatten(b, x, b.randint(-x.rank, x.rank))


def fam_squeeze(b):
    x = b.pick(lambda v: 1 in v.shape)
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if b.chance(0.2):
        return b.op1("Squeeze", [x], tuple(d for d in x.shape if d != 1), x.mag, x.lb)
    axes = [i for i in ones if b.chance(0.6)] or [ones[0]]
    out = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    axes = [a - x.rank if b.chance(0.4) else a for a in axes]
    return b.op1("Squeeze", [x, b.ints(axes, "axes")], out, x.mag, x.lb)


def fam_unsqueeze(b):
    x = b.pick(lambda v: v.rank <= 4)
    k = b.randint(1, min(2, 5 - x.rank))
    r = x.rank + k
    pos = sorted(int(p) for p in b.r.choice(r, size=k, replace=False))
    out, it = [], iter(x.shape)
    for i in range(r):
        out.append(1 if i in pos else next(it))
    axes = [p - r if b.chance(0.4) else p for p in pos]
    return b.op1("Unsqueeze", [x, b.ints(axes, "axes")], tuple(out), x.mag, x.lb)


def concat_of(b, vals, axis):
    r = vals[0].rank
    a = axis % r
    out = list(vals[0].shape)
    out[a] = sum(v.shape[a] for v in vals)
    if numel(out) > MAX_ELEMS:
        raise Skip()
    return b.op1("Concat", vals, tuple(out), max(v.mag for v in vals), min(v.lb for v in vals), axis=axis)


def fam_concat(b):
    x = b.pick(lambda v: v.rank >= 1)
    axis = b.randint(-x.rank, x.rank - 1)
    a = axis % x.rank
    vals = [x]
    for _ in range(b.randint(1, 3)):
        how = b.choice(["pool", "self", "unary", "const"])
        if how == "pool":
            try:
                vals.append(b.pick(lambda v: v.rank == x.rank and all(
                    d == e for i, (d, e) in enumerate(zip(v.shape, x.shape)) if i != a)))
            except Skip:
                vals.append(x)
        elif how == "self":
            vals.append(x)  # Concat(e, e): one value read twice by one node
        elif how == "unary":
            vals.append(ops.unary(b, x, b.choice(ops.UNARY, p=ops.UNARY_P)))
        else:
            s = list(x.shape)
            s[a] = b.randint(1, 4)
            if numel(s) > MAX_ELEMS:
                raise Skip()
            name = b.weight(tuple(s))
            vals.append(Val(name, s, mag=4.0))
    b.r.shuffle(vals)
    return concat_of(b, vals, axis)


def fam_split(b):
    x = b.pick(lambda v: v.rank >= 1 and max(v.shape) >= 2)
    axes = [i for i, d in enumerate(x.shape) if d >= 2]
    a = b.choice(axes)
    d = x.shape[a]
    axis = a - x.rank if b.chance(0.4) else a
    divisors = [n for n in range(2, min(d, 5) + 1) if d % n == 0]
    if divisors and b.chance(0.5):
        n = b.choice(divisors)
        sizes = [d // n] * n
        ins = [x]
    else:
        n = b.randint(2, min(d, 4))
        cuts = sorted(int(c) for c in b.r.choice(range(1, d), size=n - 1, replace=False))
        sizes = [e - s for s, e in zip([0] + cuts, cuts + [d])]
        ins = [x, b.ints(sizes, "split")]
    metas = []
    for sz in sizes:
        s = list(x.shape)
        s[a] = sz
        metas.append((tuple(s), "f32", x.mag, x.lb))
    outs = b.node("Split", ins, metas, axis=axis)
    return outs[-1]


def fam_slice(b):
    x = b.pick(lambda v: v.rank >= 1 and max(v.shape) >= 2)
    r = x.rank
    chosen = [i for i in range(r) if x.shape[i] >= 2 and b.chance(0.6)] or \
        [b.choice([i for i in range(r) if x.shape[i] >= 2])]
    starts, ends, axes, steps = [], [], [], []
    out = list(x.shape)
    for a in chosen:
        n = x.shape[a]
        for _ in range(20):
            step = b.choice([1, 1, 2, 3, -1, -2])
            if step > 0:
                st = b.choice([0, b.randint(0, n - 1), b.randint(-n, -1)])
                en = b.choice([n, INT64_MAX, b.randint(1, n), b.randint(-n + 1, -1) if n > 1 else n, n + 5])
            else:
                st = b.choice([n - 1, -1, b.randint(0, n - 1), INT64_MAX])
                en = b.choice([-INT64_MAX, -n - 1, b.randint(-n, n - 2)])
            length = len(range(*slice(st, en, step).indices(n)))
            if length >= 1:
                break
        else:
            raise Skip()
        out[a] = length
        starts.append(st)
        ends.append(en)
        axes.append(a - r if b.chance(0.3) else a)
        steps.append(step)
    ins = [x, b.ints(starts, "starts"), b.ints(ends, "ends")]
    if sorted(a % r for a in axes) != list(range(r)) or b.chance(0.5) or any(s != 1 for s in steps):
        ins.append(b.ints(axes, "axes"))
        if any(s != 1 for s in steps) or b.chance(0.5):
            ins.append(b.ints(steps, "steps"))
    elif axes != list(range(r)):
        ins.append(b.ints(axes, "axes"))
    return b.op1("Slice", ins, tuple(out), x.mag, x.lb)


def fam_pad(b):
    x = b.pick(lambda v: v.rank >= 1)
    mode = b.choice(["constant", "reflect", "edge"], p=[3, 2, 2])
    r = x.rank
    pads = [0] * (2 * r)
    for a in range(r):
        if b.chance(0.5):
            n = x.shape[a]
            hi = n - 1 if mode == "reflect" else 3
            pads[a], pads[a + r] = b.randint(0, min(hi, 3)), b.randint(0, min(hi, 3))
            if mode == "constant" and b.chance(0.1) and n >= 3:
                pads[a] = -1  # negative pads crop
    out = tuple(x.shape[a] + pads[a] + pads[a + r] for a in range(r))
    if numel(out) > MAX_ELEMS or min(out) < 1:
        raise Skip()
    ins = [x, b.ints(pads, "pads")]
    lb = x.lb
    attrs = {"mode": mode} if mode != "constant" or b.chance(0.3) else {}
    if mode == "constant" and b.chance(0.5):
        c = b.choice([0.0, 1.0, -2.5])
        ins.append(b.scalar(c, rank0=True))
        lb = min(lb, c)
    elif mode == "constant":
        lb = min(lb, 0.0)
    return b.op1("Pad", ins, out, max(x.mag, 2.5), lb, **attrs)


def fam_gather(b):
    x = b.pick(lambda v: v.rank >= 1)
    r = x.rank
    axis = b.randint(-r, r - 1)
    n = x.shape[axis % r]
    kind = b.choice(["scalar", "vector", "matrix", "zeros"])
    if kind == "scalar":
        idx = np.array(b.randint(-n, n - 1), dtype=np.int64)
    elif kind == "vector":
        idx = b.r.randint(-n, n, size=b.randint(1, 6)).astype(np.int64)
    elif kind == "matrix":
        idx = b.r.randint(-n, n, size=(2, b.randint(1, 3))).astype(np.int64)
    else:
        idx = np.zeros(b.randint(1, 3), dtype=np.int64)  # [0, 0]: one row repeated
    a = axis % r
    out = x.shape[:a] + idx.shape + x.shape[a + 1:]
    if numel(out) > MAX_ELEMS:
        raise Skip()
    attrs = {"axis": axis} if axis != 0 or b.chance(0.3) else {}
    return b.op1("Gather", [x, b.const(idx, "indices")], tuple(out), x.mag, x.lb, **attrs)


def fam_expand(b):
    x = b.pick(lambda v: v.rank >= 1)
    target = [b.choice([1, 2, 3, 5]) if d == 1 else (1 if b.chance(0.2) else d) for d in x.shape]
    lead = [b.choice([1, 2, 3]) for _ in range(b.choice([0, 0, 1, 2]) if x.rank < 5 else 0)]
    target = lead + target
    out = tuple(lead) + tuple(max(t, d) for t, d in zip(target[len(lead):], x.shape))
    if numel(out) > MAX_ELEMS:
        raise Skip()
    return b.op1("Expand", [x, b.ints(target, "shape")], out, x.mag, x.lb)


def fam_tile(b):
    x = b.pick(lambda v: v.rank >= 1)
    reps = [b.choice([1, 1, 2, 3]) for _ in x.shape]
    out = tuple(d * k for d, k in zip(x.shape, reps))
    if numel(out) > MAX_ELEMS:
        raise Skip()
    return b.op1("Tile", [x, b.ints(reps, "repeats")], out, x.mag, x.lb)


def fam_resize(b):
    x = b.pick(lambda v: v.rank == 4 or (v.rank in (2, 3) and b.chance(0.3)))
    r = x.rank
    mode = b.choice(["nearest", "linear"]) if r == 4 else "nearest"
    coord = b.choice(["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"])
    resized = list(range(r - 2, r)) if r == 4 or b.chance(0.5) else list(range(1, r))
    attrs = {"mode": mode} if mode != "nearest" or b.chance(0.3) else {}
    if coord != "half_pixel" or b.chance(0.3):
        attrs["coordinate_transformation_mode"] = coord
    if mode == "nearest":
        nm = b.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
        if nm != "round_prefer_floor" or b.chance(0.3):
            attrs["nearest_mode"] = nm
    out = list(x.shape)
    if b.chance(0.5):
        scales = [1.0] * r
        for a in resized:
            scales[a] = b.choice([2.0, 2.0, 3.0, 0.5, 1.5, 0.75, 1.0, 1.25])
            out[a] = int(math.floor(x.shape[a] * scales[a]))
            if out[a] == x.shape[a] and scales[a] != 1.0:
                # ONNX Runtime copies the input when the output size equals it, whatever the
                # scale says (spec: half_pixel at scale 1.25 interpolates): no oracle.
                scales[a] = 2.0
                out[a] = 2 * x.shape[a]
        if min(out) < 1 or numel(out) > MAX_ELEMS:
            raise Skip()
        ins = [x, "", b.floats(scales, "scales")]
    else:
        for a in resized:
            n = x.shape[a]
            sizes = [1, b.randint(1, 2 * n + 1), 2 * n, n + 1]
            if mode == "nearest":
                # The ratio out/in must be a float exactly: else whether x_original lands on an
                # integer (and floor/ceil/round pick which neighbour) depends on how an
                # implementation rounds the scale (1/7 as a float), which the spec leaves open.
                sizes = [m for m in sizes if (m / n).as_integer_ratio()[1] & ((m / n).as_integer_ratio()[1] - 1) == 0
                         and abs(float(np.float32(m / n)) - m / n) == 0] or [n, 2 * n]
            out[a] = b.choice(sizes)
        if numel(out) > MAX_ELEMS:
            raise Skip()
        ins = [x, "", "", b.ints(out, "sizes")]
    lb = x.lb
    return b.op1("Resize", ins, tuple(out), x.mag, lb, **attrs)


__all__ = ["flatten", "concat_of", "math"]
