"""Scatter and scan op families for gen_graph.py: ScatterElements (none/add, constant indices,
negative and, for add, duplicate ones), ScatterND (updates gathered from the data itself through
GatherND and a unary op, so their shape always fits), CumSum (any axis, exclusive/reverse) and TopK
(largest/smallest, every k). CumSum and TopK sometimes run over a whole flattened tensor, so rows
longer than the unrolled spellings take (kiln's scan and select emitters) come up too.

Only orders every engine agrees on: reduction=none never writes one position twice (ONNX leaves
the winner undefined), TopK is always sorted (sorted=0 leaves the order to the engine) and its rows
have no ties (the order of equal values' indices differs between engines)."""
import math

import numpy as np

import gen_ops as ops
from gen_graph import MAX_ELEMS, Skip, numel


def long_rows(b, x):
    """x itself, or (sometimes) x reshaped to [numel] or [a, numel / a] for long rows."""
    n = numel(x.shape)
    if n < 32 or not b.chance(0.4):
        return x
    a = b.choice([d for d in (1, 2, 3, 4) if n % d == 0])
    shape = (n,) if a == 1 and b.chance(0.5) else (a, n // a)
    return b.op1("Reshape", [x, b.ints(list(shape), "shape")], shape, x.mag, x.lb)


def fam_cumsum(b):
    x = long_rows(b, b.pick(lambda v: v.rank >= 1))
    r = x.rank
    axis = b.randint(-r, r - 1)
    n = x.shape[axis % r]
    if n * x.mag > 1e4:
        x = ops.tame(b, x, 1e4 / max(n, 1))
    attrs = {}
    for a in ("exclusive", "reverse"):
        if b.chance(0.4):
            attrs[a] = 1
    axis_c = b.const(np.array(axis if b.chance(0.7) else [axis], dtype=np.int64), "axis")
    lb = 0.0 if x.lb >= 0 else -math.inf
    return b.op1("CumSum", [x, axis_c], x.shape, n * x.mag, lb, **attrs)


def fam_topk(b):
    x = long_rows(b, b.pick(lambda v: v.rank >= 1))
    r = x.rank
    axis = b.randint(-r, r - 1)
    n = x.shape[axis % r]
    k = b.choice([1, min(n, 3), max(1, n // 2), n]) if n > 1 else 1
    out = list(x.shape)
    out[axis % r] = k
    attrs = {"axis": axis} if axis != -1 or b.chance(0.3) else {}
    if b.chance(0.4):
        attrs["largest"] = 0
    # Ties make the Indices order engine-dependent: the spec puts the lower index first, ONNX
    # Runtime does not always (seed 97194: two equal values, indices swapped). A ramp along the
    # axis — far above rounding, far below the data's spread — leaves no tie in a row (a Relu's
    # zeros included).
    if n > 1:
        ramp_shape = [1] * r
        ramp_shape[axis % r] = n
        eps = max(x.mag, 1.0) * 1e-3 / max(1.0, n / 16)
        ramp = (np.arange(n, dtype=np.float32) * np.float32(eps)).reshape(ramp_shape)
        x = b.op1("Add", [x, b.const(ramp, "ramp")], x.shape, x.mag + n * eps, x.lb)
    v, _ = b.node("TopK", [x, b.ints([k], "k")], [(tuple(out), ops.F32, x.mag, x.lb), (tuple(out), ops.I64, 0.0, 0.0)],
                  **attrs)
    return v


def fam_scatter_elements(b):
    x = b.pick(lambda v: v.rank >= 1)
    r = x.rank
    axis = b.randint(-r, r - 1)
    a = axis % r
    n = x.shape[a]
    fits = lambda v: v.rank == r and all(v.shape[d] <= x.shape[d] for d in range(r) if d != a)  # noqa: E731
    u = b.pick(fits)
    m = u.shape[a]
    red = "add" if m > n or b.chance(0.4) else "none"
    idx = np.empty(u.shape, dtype=np.int64)
    moved = np.moveaxis(idx, a, -1)  # a view: lines along the axis are its last dim
    for line in np.ndindex(*moved.shape[:-1]):
        if red == "none":  # distinct positions per line, some spelled negative
            sel = b.r.permutation(n)[:m]
        else:
            sel = b.r.randint(0, n, size=m)
        neg = b.r.randint(0, 2, size=m).astype(bool)
        moved[line] = np.where(neg, sel - n, sel)
    attrs = {"axis": axis} if axis != 0 or b.chance(0.3) else {}
    if red != "none" or b.chance(0.3):
        attrs["reduction"] = red
    dups = m if red == "add" else 1
    mag = x.mag + dups * u.mag if red == "add" else max(x.mag, u.mag)
    lb = min(x.lb, u.lb) if red == "none" else (x.lb if u.lb >= 0 else -math.inf)
    return b.op1("ScatterElements", [x, b.const(idx, "indices"), u], x.shape, mag, lb, **attrs)


def fam_scatter_nd(b):
    x = b.pick(lambda v: v.rank >= 1)
    r = x.rank
    q = b.randint(1, r)
    t = b.randint(1, 4)
    red = "add" if b.chance(0.4) else "none"
    space = int(np.prod(x.shape[:q]))
    if red == "none" and t > space:
        t = space
    flat = b.r.permutation(space)[:t] if red == "none" else b.r.randint(0, space, size=t)
    tup = np.array(np.unravel_index(flat, x.shape[:q]), dtype=np.int64).T.reshape(t, q)
    neg = b.r.randint(0, 2, size=tup.shape).astype(bool)
    tup = np.where(neg, tup - np.array(x.shape[:q], dtype=np.int64), tup)
    ushape = (t,) + tuple(x.shape[q:])
    if numel(ushape) > MAX_ELEMS:
        raise Skip()
    # Updates of the right shape: some of x's own slices, changed by a unary op.
    src = b.r.randint(0, np.array(x.shape[:q]), size=(t, q)).astype(np.int64)
    g = b.op1("GatherND", [x, b.const(src, "gidx")], ushape, x.mag, x.lb)
    u = b.op1("Neg", [g], ushape, x.mag, -x.mag)
    attrs = {"reduction": red} if red != "none" or b.chance(0.3) else {}
    mag = x.mag * (1 + t) if red == "add" else x.mag
    return b.op1("ScatterND", [x, b.const(tup, "indices"), u], x.shape, mag, -mag, **attrs)
