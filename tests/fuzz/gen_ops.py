"""Op families for gen_graph.py: elementwise math, contractions, convolutions, pools, reductions and
normalisations. Each family takes values from the builder's pool, adds nodes and returns its main
result; it raises Skip when the pool has nothing it applies to. Layout and indexing families are in
gen_layout.py. See gen_graph.py for the value-range rules (`mag`, `lb`).
"""
import math

import numpy as np

import gen_layout
from gen_graph import BOOL, F32, I64, MAX_ELEMS, Skip, Val, broadcast, numel

INF = math.inf


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


# ---------------------------------------------------------------- inputs

def make_inputs(b):
    """1-3 graph inputs in the shapes real models have (images, sequences, matrices) or odd ones."""
    kinds = ["image", "sequence", "matrix", "odd"]
    first = b.choice(kinds, p=[0.35, 0.3, 0.2, 0.15])
    shapes = [input_shape(b, first)]
    for _ in range(b.choice([0, 1, 2], p=[0.45, 0.4, 0.15])):
        if b.chance(0.5):  # a second input that combines with the first (same or broadcastable)
            s = list(shapes[0])
            for i in range(len(s)):
                if b.chance(0.3):
                    s[i] = 1
            if b.chance(0.3) and len(s) > 1:
                s = s[b.randint(1, len(s) - 1):]
            shapes.append(tuple(s))
        else:
            shapes.append(input_shape(b, b.choice(kinds)))
    for s in shapes:
        b.graph_input(s, positive=b.chance(0.2))


def input_shape(b, kind):
    while True:
        if kind == "image":
            s = (b.choice([1, 1, 2]), b.choice([1, 3, 4, 6, 8, 16]), b.choice([1, 5, 7, 8, 12, 16, 17, 32]),
                 b.choice([1, 5, 7, 8, 12, 16, 17, 32]))
            if b.chance(0.5):
                s = (s[0], s[1], s[2], s[2])
        elif kind == "sequence":
            s = (b.choice([1, 2]), b.choice([1, 3, 7, 16]), b.choice([7, 16, 64, 66, 130]))
        elif kind == "matrix":
            s = (b.choice([1, 3, 7, 66, 130]), b.choice([1, 7, 64, 66, 130]))
        else:
            s = tuple(b.choice([1, 2, 3, 4, 5, 7, 9]) for _ in range(b.randint(1, 5)))
        if numel(s) <= MAX_ELEMS // 2:
            return s


# ---------------------------------------------------------------- value-range helpers

def unary(b, v, op):
    """Applies one activation (ONNX op or a spelled-out form) to v, meeting its domain first."""
    s, m, lb = v.shape, v.mag, v.lb
    if op == "Relu":
        return b.op1("Relu", [v], s, m, max(lb, 0.0))
    if op == "Sigmoid":
        return b.op1("Sigmoid", [v], s, 1.0, sigmoid(-m) if sigmoid(-m) > 1e-30 else 0.0)
    if op == "Tanh":
        return b.op1("Tanh", [v], s, min(m, 1.0), math.tanh(lb) if lb > -INF else -1.0)
    if op == "Erf":
        return b.op1("Erf", [v], s, min(m, 1.0), math.erf(lb) if lb > -INF else -1.0)
    if op == "Abs":
        return b.op1("Abs", [v], s, m, 0.0)
    if op == "Neg":
        return b.op1("Neg", [v], s, m)
    if op == "Exp":
        v = tame(b, v, 8.0)
        return b.op1("Exp", [v], v.shape, math.exp(v.mag), math.exp(max(v.lb, -v.mag)))
    if op == "Log":
        v = positive(b, v, 1e-3)
        return b.op1("Log", [v], v.shape, max(abs(math.log(v.lb)), math.log(max(v.mag, 1.0))) + 1)
    if op == "Sqrt":
        if v.lb < 0:
            v = positive(b, v, 0.0)
        return b.op1("Sqrt", [v], v.shape, math.sqrt(v.mag), math.sqrt(max(v.lb, 0.0)))
    if op == "Reciprocal":
        v = positive(b, v, 0.25)
        return b.op1("Reciprocal", [v], v.shape, 1.0 / v.lb, 1.0 / v.mag)
    if op == "LeakyRelu":
        a = b.choice([0.01, 0.1, 0.2])
        return b.op1("LeakyRelu", [v], s, m, a * lb if lb < 0 else lb, alpha=a)
    if op == "Elu":
        return b.op1("Elu", [v], s, m, -1.0, alpha=1.0)
    if op == "HardSigmoid":
        a, c = b.choice([(0.2, 0.5), (1 / 6, 0.5)])
        return b.op1("HardSigmoid", [v], s, 1.0, 0.0, alpha=a, beta=c)
    if op == "HardSwish":
        return b.op1("HardSwish", [v], s, m, -0.375)
    if op == "Softplus":
        v = tame(b, v, 30.0)
        return b.op1("Softplus", [v], v.shape, v.mag + 1.0, 0.0)
    if op == "Clip":
        lo, hi = b.choice([(0.0, 6.0), (-1.0, 1.0), (-2.5, 0.5), (None, 1.5), (-0.5, None)])
        ins = [v, b.scalar(lo, rank0=True) if lo is not None else "", ]
        if hi is not None:
            ins.append(b.scalar(hi, rank0=True))
        mag = max(abs(lo) if lo is not None else m, abs(hi) if hi is not None else m)
        return b.op1("Clip", ins, s, min(m, mag), lo if lo is not None else lb)
    if op == "Swish":  # x * Sigmoid(x), as exporters write SiLU
        sg = b.op1("Sigmoid", [v], s, 1.0, 0.0)
        return b.op1("Mul", [v, sg], s, m, -0.3)
    if op == "Gelu":  # 0.5 * x * (1 + Erf(x / sqrt 2)), PyTorch's export of nn.GELU
        d = b.op1("Div", [v, b.scalar(math.sqrt(2.0))], s, m)
        e = b.op1("Erf", [d], s, 1.0, -1.0)
        p = b.op1("Add", [e, b.scalar(1.0)], s, 2.0, 0.0)
        x = b.op1("Mul", [v, p], s, 2 * m)
        return b.op1("Mul", [x, b.scalar(0.5)], s, m, -0.2)
    if op == "GeluTanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        v = tame(b, v, 20.0)
        s, m = v.shape, v.mag
        c = b.op1("Pow", [v, b.scalar(3.0)], s, m ** 3)
        t = b.op1("Mul", [c, b.scalar(0.044715)], s, 0.05 * m ** 3)
        u = b.op1("Add", [v, t], s, m + 0.05 * m ** 3)
        w = b.op1("Mul", [u, b.scalar(math.sqrt(2 / math.pi))], s, m + 0.05 * m ** 3)
        h = b.op1("Tanh", [w], s, 1.0, -1.0)
        p = b.op1("Add", [h, b.scalar(1.0)], s, 2.0, 0.0)
        x = b.op1("Mul", [v, p], s, 2 * m)
        return b.op1("Mul", [x, b.scalar(0.5)], s, m, -0.2)
    raise AssertionError(op)


UNARY = ["Relu", "Sigmoid", "Tanh", "Erf", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "LeakyRelu",
         "Elu", "HardSigmoid", "HardSwish", "Softplus", "Clip", "Swish", "Gelu", "GeluTanh"]
UNARY_P = [5, 3, 3, 2, 1, 1, 2, 2, 2, 1, 2, 1, 1, 2, 1, 3, 2, 2, 1]


def positive(b, v, floor):
    """v itself when its lower bound is above `floor`, else a positive value made from it."""
    if v.lb > floor:
        return v
    how = b.choice(["abs_add", "sigmoid_add", "exp_tanh", "softplus_add", "square_add", "clip"])
    s = v.shape
    if how == "abs_add":
        c = b.choice([0.5, 1.0])
        a = b.op1("Abs", [v], s, v.mag, 0.0)
        return b.op1("Add", [a, b.scalar(c)], s, v.mag + c, c)
    if how == "sigmoid_add":
        g = b.op1("Sigmoid", [v], s, 1.0, 0.0)
        return b.op1("Add", [g, b.scalar(0.5)], s, 1.5, 0.5)
    if how == "exp_tanh":
        t = b.op1("Tanh", [v], s, 1.0, -1.0)
        return b.op1("Exp", [t], s, math.e, 1 / math.e)
    if how == "softplus_add":
        v = tame(b, v, 30.0)
        sp = b.op1("Softplus", [v], v.shape, v.mag + 1, 0.0)
        return b.op1("Add", [sp, b.scalar(0.25)], v.shape, v.mag + 1.25, 0.25)
    if how == "square_add":
        v = tame(b, v, 100.0)
        q = b.op1("Mul", [v, v], v.shape, v.mag ** 2, 0.0)
        return b.op1("Add", [q, b.scalar(1.0)], v.shape, v.mag ** 2 + 1, 1.0)
    return b.op1("Clip", [v, b.scalar(0.5, rank0=True), b.scalar(8.0, rank0=True)], s, min(v.mag, 8.0), 0.5)


def tame(b, v, limit):
    """v itself when its magnitude is at most `limit`, else a squashed value made from it."""
    if v.mag <= limit:
        return v
    how = b.choice(["tanh", "clip", "scale", "sigmoid"])
    s = v.shape
    if how == "tanh":
        return b.op1("Tanh", [v], s, 1.0, -1.0)
    if how == "sigmoid":
        return b.op1("Sigmoid", [v], s, 1.0, 0.0)
    if how == "clip":
        return b.op1("Clip", [v, b.scalar(-limit / 2, rank0=True), b.scalar(limit / 2, rank0=True)], s,
                     limit / 2, max(v.lb, -limit / 2))
    k = 2.0 ** -math.ceil(math.log2(v.mag / limit * 2))
    return b.op1("Mul", [v, b.scalar(k)], s, v.mag * k, v.lb * k if v.lb > -INF and v.lb >= 0 else -INF)


def bcast_shape(b, shape, grow=False):
    """A shape that broadcasts against `shape`: leading dims dropped, some dims set to 1; with
    `grow`, some size-1 dims of `shape` become larger (the result is bigger than `shape`)."""
    s = list(shape)
    if s and b.chance(0.4):
        s = s[b.randint(0, len(s)):]
    s = [1 if b.chance(0.4) else d for d in s]
    if grow:
        one_dims = [i for i in range(len(shape)) if shape[i] == 1]
        off = len(shape) - len(s)
        for i in one_dims:
            if i >= off and b.chance(0.6):
                s[i - off] = b.choice([2, 3, 5])
        if b.chance(0.3) and len(s) == len(shape) and len(s) < 5:
            s = [b.choice([2, 3])] + s
    out = broadcast(shape, s)
    if numel(out) > MAX_ELEMS:
        raise Skip()
    return tuple(s)


# ---------------------------------------------------------------- elementwise families

def fam_unary_chain(b):
    v = b.pick()
    for _ in range(b.randint(1, 4)):
        v = unary(b, v, b.choice(UNARY, p=UNARY_P))
    return v


def binary(b, op, x, y):
    """x op y with broadcasting; y may be a Val or (shape, constant name, mag, lb)."""
    if isinstance(y, Val):
        ys, yname, ym, ylb = y.shape, y, y.mag, y.lb
    else:
        ys, yname, ym, ylb = y
    out = broadcast(x.shape, ys)
    if out is None or numel(out) > MAX_ELEMS:
        raise Skip()
    if op == "Add":
        mag, lb = x.mag + ym, x.lb + ylb
    elif op == "Sub":
        mag, lb = x.mag + ym, x.lb - ym
    elif op == "Mul":
        mag = x.mag * ym
        lb = x.lb * ylb if x.lb >= 0 and ylb >= 0 else -mag
    elif op == "Div":
        mag = x.mag / ylb
        lb = x.lb / ym if x.lb >= 0 else -mag
    elif op == "Max":
        mag, lb = max(x.mag, ym), max(x.lb, ylb)
    else:
        mag, lb = max(x.mag, ym), min(x.lb, ylb)
    ins = [x, yname]
    if op in ("Add", "Mul", "Max", "Min") and b.chance(0.3):
        ins.reverse()
    return b.op1(op, ins, out, mag, lb)


def fam_binary(b):
    op = b.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"], p=[4, 2, 4, 2, 1, 1, 2])
    x = b.pick()
    if op == "Pow":
        e = b.choice([2.0, 3.0, 0.5, 1.5, -1.0, -0.5, 4.0])
        x = tame(b, x, 8.0 if e > 2 else 30.0)
        if e != int(e) or e < 0:  # after tame: squashing may lose the lower bound
            x = positive(b, x, 0.25 if e < 0 else 0.0)
        if e < 0:
            mag, lb = x.lb ** e, x.mag ** e
        elif e == int(e) and int(e) % 2 == 0:
            mag, lb = x.mag ** e, x.lb ** e if x.lb >= 0 else 0.0
        elif e == int(e):
            mag = x.mag ** e
            lb = x.lb ** e if x.lb > -INF else -mag
        else:
            mag, lb = x.mag ** e, max(x.lb, 0.0) ** e
        return b.op1("Pow", [x, b.scalar(e)], x.shape, mag, lb)
    if op == "Mul":
        x = tame(b, x, 100.0)
    which = b.choice(["pool", "self", "const", "const_grow"], p=[4, 1, 4, 2])
    if which == "pool":
        y = b.pick(lambda v: v is not x and broadcast(x.shape, v.shape) is not None
                   and numel(broadcast(x.shape, v.shape)) <= MAX_ELEMS)
        if op == "Div":
            y = positive(b, y, 0.25)
        if op == "Mul":
            y = tame(b, y, 100.0)
    elif which == "self":
        y = positive(b, x, 0.25) if op == "Div" else x
    else:
        s = bcast_shape(b, x.shape, grow=which == "const_grow")
        if op == "Div":
            arr = b.r.uniform(0.5, 2.0, size=s).astype(np.float32)
            y = (s, b.const(arr), 2.0, 0.5)
        else:
            arr = b.r.standard_normal(size=s).astype(np.float32)
            y = (s, b.const(arr), 4.0, -4.0)
    return binary(b, op, x, y)


def fam_compare_where(b):
    """Where(cond, x, y) with cond from a comparison (or a constant mask); sometimes the bool
    itself becomes an output."""
    x = b.pick()
    how = b.choice(["Greater", "Less", "GreaterOrEqual", "const"])
    if how == "const":
        s = bcast_shape(b, x.shape)
        cond_name, cs = b.const(b.r.random_sample(s) < 0.5, "mask"), s
    else:
        s = bcast_shape(b, x.shape)
        cond = b.op1(how, [x, b.const(b.r.standard_normal(s).astype(np.float32))], broadcast(x.shape, s), 1,
                     dtype=BOOL)
        cond_name, cs = cond, cond.shape
        if b.chance(0.2):
            return cond  # a bool graph output (compared exactly)
    y = b.pick(lambda v: broadcast(broadcast(cs, x.shape), v.shape) is not None
               and numel(broadcast(broadcast(cs, x.shape), v.shape)) <= MAX_ELEMS) if b.chance(0.6) else None
    if y is None:
        ys = bcast_shape(b, x.shape)
        yname, ym = b.const(b.r.standard_normal(ys).astype(np.float32)), 4.0
    else:
        ys, yname, ym = y.shape, y, y.mag
    out = broadcast(broadcast(cs, x.shape), ys)
    if out is None or numel(out) > MAX_ELEMS:
        raise Skip()
    ins = [cond_name, x, yname] if b.chance(0.5) else [cond_name, yname, x]
    return b.op1("Where", ins, out, max(x.mag, ym))


def fam_variadic(b):
    """Sum/Mean/Max/Min of 2-3 operands, broadcasting."""
    x = b.pick()
    others = [b.pick(lambda v: broadcast(x.shape, v.shape) is not None
                     and numel(broadcast(x.shape, v.shape)) <= MAX_ELEMS) for _ in range(b.randint(1, 2))]
    out = x.shape
    for o in others:
        out = broadcast(out, o.shape)
    if out is None or numel(out) > MAX_ELEMS:
        raise Skip()
    op = b.choice(["Sum", "Mean", "Max", "Min"])
    ops = [x] + others
    mag = sum(o.mag for o in ops) if op == "Sum" else max(o.mag for o in ops)
    return b.op1(op, ops, out, mag)


def fam_residual(b):
    """x + f(x) with f a short chain that keeps the shape (ResNet/transformer blocks)."""
    x = b.pick()
    y = x
    for _ in range(b.randint(1, 3)):
        k = b.choice(["unary", "affine", "norm", "conv"], p=[3, 2, 1, 1])
        if k == "unary":
            y = unary(b, y, b.choice(UNARY, p=UNARY_P))
        elif k == "affine":
            s = bcast_shape(b, y.shape)
            y = binary(b, b.choice(["Mul", "Add"]), tame(b, y, 100.0), (s, b.weight(s), 4.0, -4.0))
        elif k == "norm" and y.rank >= 1 and y.shape[-1] > 1:
            y = layernorm(b, y, -1 if b.chance(0.7) else b.randint(-y.rank, -1))
        elif k == "conv" and y.rank == 4:
            y = conv(b, y, same=True)
    if y is x:
        y = unary(b, y, "Relu")
    r = b.op1("Add", [x, y] if b.chance(0.5) else [y, x], x.shape, x.mag + y.mag)
    if b.chance(0.4):
        r = unary(b, r, b.choice(["Relu", "Gelu", "Tanh"]))
    return r


def fam_fanout(b):
    """One value read by two branches that join again (Inception/GLU shapes)."""
    x = b.pick()
    l = unary(b, x, b.choice(UNARY, p=UNARY_P))
    r = unary(b, x, b.choice(UNARY, p=UNARY_P))
    join = b.choice(["Mul", "Add", "Sub", "Concat"])
    if join == "Concat":
        # The two branches may differ in rank (a unary op that reshapes): then they are added.
        ok = l.rank and l.rank == r.rank
        return gen_layout.concat_of(b, [l, r], b.randint(-l.rank, l.rank - 1)) if ok else binary(b, "Add", l, r)
    return binary(b, join, tame(b, l, 100.0), tame(b, r, 100.0))


# The contraction/conv/pool/reduce/norm families live in gen_nn.py; the registry is here.
import gen_nn  # noqa: E402
import gen_norm  # noqa: E402
import gen_index  # noqa: E402
from gen_nn import conv, layernorm  # noqa: E402,F401


def fam_int_pow(b):
    """Integer Pow (exact powers of small integers, as index arithmetic has them): a graph input
    clipped to [-3, 3] and rounded into int64 (exact in every engine: rounding a computed value
    would put engines on both sides of a .5), raised to a constant or computed power, cast back."""
    def small_int(v):
        c = b.op1("Clip", [v, b.scalar(-3.0, rank0=True), b.scalar(3.0, rank0=True)], v.shape, 3.0, -3.0)
        return b.op1("Cast", [b.op1("Round", [c], v.shape, 3.0, -3.0)], v.shape, 3.0, -3.0, to=7, dtype=I64)
    v = b.pick(lambda x: x in b.inputs)
    i = small_int(v)
    if b.chance(0.6):
        e = b.const(np.array(b.randint(0, 4), dtype=np.int64), "e")
        top = 4
    else:  # a run-time exponent in [0, 3]
        e = b.op1("Abs", [small_int(b.pick(lambda x: x in b.inputs and x.shape == v.shape))], v.shape, 3.0, 0.0,
                  dtype=I64)
        top = 3
    p = b.op1("Pow", [i, e], v.shape, 3.0 ** top, dtype=I64)
    return b.op1("Cast", [p], v.shape, 3.0 ** top, to=1)


def pick_family(b):
    fams = [
        (fam_unary_chain, 4), (fam_binary, 5), (fam_compare_where, 1), (fam_variadic, 1),
        (fam_residual, 2), (fam_fanout, 1), (fam_int_pow, 1),
        (gen_nn.fam_matmul, 4), (gen_nn.fam_conv, 3), (gen_norm.fam_pool, 2), (gen_norm.fam_reduce, 3),
        (gen_norm.fam_softmax, 2), (gen_norm.fam_layernorm, 2), (gen_norm.fam_batchnorm, 1), (gen_norm.fam_recurrent, 1),
        (gen_nn.fam_inverted_residual, 2), (gen_nn.fam_wide_conv, 1), (gen_nn.fam_depthwise_rows, 1),
        (gen_nn.fam_inception, 1), (gen_nn.fam_narrow_windows, 1), (gen_nn.fam_grouped_conv, 1),
        (gen_nn.fam_patch_conv, 1),
        (gen_layout.fam_transpose, 2), (gen_layout.fam_reshape, 2), (gen_layout.fam_flatten, 1),
        (gen_layout.fam_squeeze, 1), (gen_layout.fam_unsqueeze, 1), (gen_layout.fam_concat, 2),
        (gen_layout.fam_split, 1), (gen_layout.fam_slice, 2), (gen_layout.fam_pad, 2),
        (gen_layout.fam_gather, 2), (gen_layout.fam_expand, 1), (gen_layout.fam_tile, 1),
        (gen_layout.fam_resize, 1),
        (gen_index.fam_cumsum, 1), (gen_index.fam_topk, 1), (gen_index.fam_scatter_elements, 1),
        (gen_index.fam_scatter_nd, 1),
        # Drawn only when asked (run_fuzz.py --weight NAME=W): last and of weight 0 by default, so
        # every seed's graph stays what it was (a family of weight 0 at the end leaves the other
        # families' cumulative weights, so the same draw picks the same family).
        (gen_nn.fam_squeeze_excitation, 0), (gen_nn.fam_fused_qkv_attention, 0), (gen_nn.fam_conv3d, 0),
        (gen_nn.fam_grid_sample, 0), (gen_nn.fam_conv_chain, 0),
    ]
    return b.choice([f for f, _ in fams], p=[FAMILY_WEIGHTS.get(f.__name__, w) for f, w in fams])


# Family weights by function name that replace pick_family's (run_fuzz.py --weight), for runs
# biased towards one family.
FAMILY_WEIGHTS = {}


__all__ = ["make_inputs", "pick_family", "unary", "positive", "tame", "binary", "bcast_shape", "UNARY", "UNARY_P",
           "I64", "F32"]
