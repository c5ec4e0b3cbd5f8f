"""Normalisation-like op families for gen_graph.py (split from gen_nn.py): BatchNormalization,
MaxPool/AveragePool/LpPool and their global forms, Reduce*/ArgMax, Softmax and LayerNorm as ONNX
ops and spelled out as primitives, and the recurrent layers (RNN/GRU/LSTM)."""
import math

import numpy as np

import gen_ops as ops
from gen_graph import F32, I64, Skip, numel

INF = math.inf


def batchnorm(b, x):
    c = x.shape[1]
    ins = [x, b.weight((c,), 0.3, "gamma"), b.weight((c,), 0.3, "beta"), b.weight((c,), 0.3, "mean"),
           b.const(b.r.uniform(0.5, 2.0, size=(c,)).astype(np.float32), "var")]
    # gamma = 1 + 0.3 n would need an Add; a constant near 1 is what trained models have
    ins[1] = b.const((1 + 0.3 * b.r.standard_normal(c)).astype(np.float32), "gamma")
    return b.op1("BatchNormalization", ins, x.shape, 2 * x.mag + 2, epsilon=b.choice([1e-5, 1e-3]))


def fam_batchnorm(b):
    return batchnorm(b, b.pick(lambda v: v.rank >= 2))


# ---------------------------------------------------------------- pools

def fam_pool(b):
    x = b.pick(lambda v: v.rank == 4 or (v.rank == 3 and b.chance(0.3)))
    op = b.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"], p=[4, 3, 2, 1])
    spatial = x.shape[2:]
    if op.startswith("Global"):
        return b.op1(op, [x], x.shape[:2] + (1,) * len(spatial), x.mag, x.lb)
    r = len(spatial)
    ks = [b.randint(1, min(n, 5)) if n > 1 else 1 for n in spatial]
    strides = [b.choice([1, 2, 2, 3]) for _ in spatial]
    dil = [b.choice([1, 1, 2]) if op == "MaxPool" else 1 for _ in spatial]
    auto = b.choice([None, None, None, "SAME_UPPER", "VALID"])
    pads = [0] * (2 * r)
    if auto is None and b.chance(0.6):
        pads = [b.randint(0, k - 1) if k > 1 else 0 for k in ks] * 2
        if b.chance(0.3):
            pads[r:] = [b.randint(0, k - 1) if k > 1 else 0 for k in ks]
    if auto == "SAME_UPPER":
        # ONNX Runtime's pools get SAME with dilations wrong (MaxPool [4,2] k=[3,1] d=[2,1] gives
        # H 2, not ceil(4/1) = 4) and refuse strides above the kernel: no oracle for those.
        dil = [1] * r
        strides = [min(s, k) for s, k in zip(strides, ks)]
    ceil = auto is None and b.chance(0.3)
    eff = [d * (k - 1) + 1 for k, d in zip(ks, dil)]
    if auto == "SAME_UPPER":
        out_sp = [-(-n // s) for n, s in zip(spatial, strides)]
    else:
        out_sp = []
        for i, (n, e, s) in enumerate(zip(spatial, eff, strides)):
            span = n + pads[i] + pads[i + r] - e
            if span < 0:
                raise Skip()
            lo, hi = span // s + 1, -(-span // s) + 1
            # Ceil mode's extra window must start inside the input or its left padding: beyond,
            # PyTorch, ONNX Runtime and the spec's versions disagree, so that case is not generated.
            if ceil and hi > lo and (hi - 1) * s >= n + pads[i]:
                ceil = False
            out_sp.append((hi, lo))
        out_sp = [hi if ceil else lo for hi, lo in out_sp]
    out = x.shape[:2] + tuple(out_sp)
    attrs = {"kernel_shape": ks}
    if auto is not None:
        attrs["auto_pad"] = auto
    elif any(pads) or b.chance(0.2):
        attrs["pads"] = pads
    if any(s != 1 for s in strides) or b.chance(0.3):
        attrs["strides"] = strides
    if ceil:
        attrs["ceil_mode"] = 1
    if op == "MaxPool" and (any(d != 1 for d in dil) or b.chance(0.1)):
        attrs["dilations"] = dil
    if op == "AveragePool" and b.chance(0.4):
        attrs["count_include_pad"] = 1
    lb = x.lb if op == "MaxPool" or auto is None and not any(pads) else min(x.lb, 0.0)
    if op == "MaxPool" and b.chance(0.25):
        # With the Indices output (flat positions in x, row- or column-major): an int64 graph output
        # compared exactly, or turned back into a float that later ops use.
        if b.chance(0.3):
            attrs["storage_order"] = 1
        y, ind = b.node(op, [x], [(out, F32, x.mag, lb), (out, I64, numel(x.shape), 0.0)], **attrs)
        if b.chance(0.5):
            b.op1("Cast", [ind], out, numel(x.shape), 0.0, to=1)
        return y
    return b.op1(op, [x], out, x.mag, lb, **attrs)


# ---------------------------------------------------------------- reductions

REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceL1", "ReduceSumSquare",
          "ReduceLogSumExp", "ReduceProd", "ArgMax", "ArgMin"]
REDUCE_P = [4, 4, 3, 2, 1, 1, 1, 1, 1, 1, 1]


def reduce(b, x, op, axes, keepdims):
    """One Reduce* node; `axes` None means all axes (the attribute/input omitted)."""
    r = x.rank
    norm = sorted(set(a % r for a in axes)) if axes is not None else list(range(r))
    n = numel([x.shape[a] for a in norm])
    out = tuple((1 if i in norm else d) for i, d in enumerate(x.shape) if keepdims or i not in norm)
    attrs = {"keepdims": keepdims} if keepdims == 0 or b.chance(0.5) else {}
    ins = [x]
    if axes is not None:
        if op == "ReduceSum":
            ins.append(b.ints(axes, "axes"))
        else:
            attrs["axes"] = list(axes)
    mag, lb = x.mag, -INF
    if op == "ReduceSum":
        mag = x.mag * (n if x.lb >= 0 else 2 * math.sqrt(n))
        lb = n * x.lb if x.lb >= 0 else -INF
    elif op in ("ReduceMean", "ReduceMax", "ReduceMin"):
        lb = x.lb
    elif op == "ReduceL1":
        mag, lb = x.mag * n, 0.0
    elif op == "ReduceL2":
        mag, lb = x.mag * math.sqrt(n), 0.0
    elif op == "ReduceSumSquare":
        mag, lb = x.mag ** 2 * n, 0.0
    elif op == "ReduceLogSumExp":
        mag = x.mag + math.log(n) + 1
    elif op == "ReduceProd":
        mag = x.mag ** n
    return b.op1(op, ins, out, mag, lb, **attrs)


def fam_reduce(b):
    x = b.pick(lambda v: v.rank >= 1)
    op = b.choice(REDUCE, p=REDUCE_P)
    r = x.rank
    keepdims = b.choice([0, 1])
    if op in ("ArgMax", "ArgMin"):
        axis = b.randint(-r, r - 1)
        out = tuple((1 if i == axis % r else d) for i, d in enumerate(x.shape) if keepdims or i != axis % r)
        attrs = {"axis": axis, "keepdims": keepdims}
        if b.chance(0.3):
            attrs["select_last_index"] = 1
        return b.op1(op, [x], out, 1, dtype=I64, **attrs)
    if b.chance(0.15):
        axes = None
    else:
        chosen = [i for i in range(r) if b.chance(0.4)] or [b.randint(0, r - 1)]
        b.r.shuffle(chosen)
        axes = [a - r if b.chance(0.4) else a for a in chosen]
    norm = range(r) if axes is None else sorted(set(a % r for a in axes))
    n = numel([x.shape[a] for a in norm])
    if op == "ReduceProd":
        if n > 12:
            raise Skip()
        x = ops.tame(b, x, 1.5)
    elif op == "ReduceLogSumExp":
        x = ops.tame(b, x, 20.0)
    elif op == "ReduceSumSquare":
        x = ops.tame(b, x, 30.0)
    return reduce(b, x, op, axes, keepdims)


# ---------------------------------------------------------------- Softmax / LayerNorm

def softmax(b, x, axis):
    """Softmax over `axis`: the ONNX op, LogSoftmax, or spelled out (with or without max shift)."""
    kind = b.choice(["op", "log", "spelled", "naive", "hard"], p=[4, 1, 3, 1 if x.mag <= 20 else 0, 1])
    s = x.shape
    if kind == "op":
        return b.op1("Softmax", [x], s, 1.0, 0.0, axis=axis)
    if kind == "hard":  # 1 at the row's first maximum (kiln: ArgMax == positions), 0 elsewhere
        return b.op1("Hardmax", [x], s, 1.0, 0.0, axis=axis)
    if kind == "log":
        return b.op1("LogSoftmax", [x], s, 2 * x.mag + math.log(s[axis]) + 1, axis=axis)
    red = tuple(1 if i == axis % x.rank else d for i, d in enumerate(s))
    if kind == "spelled":
        m = b.op1("ReduceMax", [x], red, x.mag, axes=[axis], keepdims=1)
        d = b.op1("Sub", [x, m], s, 2 * x.mag)
        e = b.op1("Exp", [d], s, 1.0, 0.0)
    else:
        e = b.op1("Exp", [x], s, math.exp(x.mag), math.exp(-x.mag))
    t = b.op1("ReduceSum", [e, b.ints([axis], "axes")], red, e.mag * s[axis], 1e-9)
    return b.op1("Div", [e, t], s, 1.0, 0.0)


def fam_softmax(b):
    x = b.pick(lambda v: v.rank >= 1)
    if b.chance(0.3):  # a temperature, as attention scores have
        x = b.op1("Mul", [ops.tame(b, x, 100.0), b.scalar(b.choice([0.125, 0.5, 2.0]))], x.shape,
                  2 * min(x.mag, 100.0))
    return softmax(b, x, b.randint(-x.rank, x.rank - 1))


def layernorm(b, x, axis):
    """Normalises over axes [axis, rank): LayerNormalization (opset 17) or spelled out as
    ReduceMean, Sub, Pow/Mul, ReduceMean, Add eps, Sqrt, Div/Reciprocal·Mul, scale, shift."""
    x = ops.tame(b, x, 1000.0)
    r, s = x.rank, x.shape
    axis = axis % r
    norm_shape = s[axis:]
    # A row that is constant (a clamp's plateau, a broadcast) has variance 0, and its normalised
    # value is float rounding times 1/sqrt(eps): no implementation agrees on it. A fixed ramp
    # added over the normalised axes keeps every row's variance away from 0.
    ramp = np.linspace(-1.0, 1.0, numel(norm_shape)).reshape(norm_shape) * 0.25 * max(x.mag, 1.0)
    x = b.op1("Add", [x, b.const(ramp.astype(np.float32), "ramp")], s, 1.25 * x.mag + 0.25)
    gamma = b.const((1 + 0.2 * b.r.standard_normal(norm_shape)).astype(np.float32), "gamma")
    beta = b.weight(norm_shape, 0.2, "beta") if b.chance(0.7) else None
    eps = b.choice([1e-5, 1e-6, 1e-12])
    mag = 4.0 * 1.6 + 1
    if b.chance(0.5):
        attrs = {"epsilon": eps} if eps != 1e-5 else {}
        if axis != r - 1 or b.chance(0.3):
            attrs["axis"] = axis - r if b.chance(0.5) else axis
        return b.op1("LayerNormalization", [x, gamma] + ([beta] if beta else []), s, mag, **attrs)
    axes = list(range(axis - r, 0)) if b.chance(0.5) else list(range(axis, r))
    red = s[:axis] + (1,) * (r - axis)
    mean = b.op1("ReduceMean", [x], red, x.mag, axes=axes)
    d = b.op1("Sub", [x, mean], s, 2 * x.mag)
    sq = b.op1("Pow", [d, b.scalar(2.0)], s, 4 * x.mag ** 2, 0.0) if b.chance(0.5) else \
        b.op1("Mul", [d, d], s, 4 * x.mag ** 2, 0.0)
    var = b.op1("ReduceMean", [sq], red, sq.mag, 0.0, axes=axes)
    ve = b.op1("Add", [var, b.scalar(eps)], red, sq.mag, eps)
    sd = b.op1("Sqrt", [ve], red, math.sqrt(sq.mag), math.sqrt(eps))
    if b.chance(0.5):
        y = b.op1("Div", [d, sd], s, 4.0)
    else:
        inv = b.op1("Reciprocal", [sd], red, 1 / math.sqrt(eps), 0.0)
        y = b.op1("Mul", [d, inv], s, 4.0)
    y = b.op1("Mul", [y, gamma], s, mag)
    if beta:
        y = b.op1("Add", [y, beta], s, mag)
    return y


def fam_layernorm(b):
    x = b.pick(lambda v: v.rank >= 1 and v.shape[-1] > 1)
    if x.rank >= 3 and x.shape[1] > 1 and b.chance(0.25):
        # Over the channels of a channels-first value (ConvNeXt, MobileViT): the rows are read
        # across memory through the Transpose (row kernels that must not jam them).
        perm = [0] + list(range(2, x.rank)) + [1]
        xt = b.op1("Transpose", [x], tuple(x.shape[i] for i in perm), x.mag, x.lb, perm=perm)
        return layernorm(b, xt, -1)
    return layernorm(b, x, -1 if b.chance(0.6) else b.randint(-x.rank, x.rank - 1))


# ---------------------------------------------------------------- RNN / GRU / LSTM

# Activations every engine implements for the recurrent ops, with alpha/beta where they take them.
RECURRENT_ACTS = [("Sigmoid", None, None), ("Tanh", None, None), ("Relu", None, None), ("HardSigmoid", 0.3, 0.45),
                  ("LeakyRelu", 0.2, None), ("Softsign", None, None), ("Affine", 0.5, 0.1), ("ScaledTanh", 0.8, 1.2)]


def fam_recurrent(b):
    """RNN, GRU or LSTM over a rank-3 value read as [seq, batch, input]: any direction, bias, initial states (inputs or constants), peepholes, clip, GRU's
    linear_before_reset, LSTM's input_forget, custom activations, and constant sequence_lens that
    stop some batch entries early (a backward direction then starts each entry from its own
    length)."""
    x = b.pick(lambda v: v.rank == 3 and v.shape[0] <= 24 and v.shape[1] <= 24 and 1 <= v.shape[2] <= 64)
    x = ops.tame(b, x, 4.0)
    op = b.choice(["RNN", "GRU", "LSTM"])
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    # layout 1 (batch first) is ONNX Runtime's "not supported" (the conformance tests
    # gru/lstm/simple_rnn_batchwise cover it against the ONNX data instead).
    layout = 0
    t, n, i = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    direction = b.choice(["forward", "reverse", "bidirectional"], p=[0.5, 0.2, 0.3])
    d = 2 if direction == "bidirectional" else 1
    h = b.choice([1, 3, 5, 8, 16])
    attrs = {"hidden_size": h}
    if direction != "forward" or b.chance(0.2):
        attrs["direction"] = direction
    if layout:
        attrs["layout"] = 1
    ins = [x, b.weight((d, g * h, i), 1 / math.sqrt(i)), b.weight((d, g * h, h), 1 / math.sqrt(h))]
    ins.append(b.weight((d, 2 * g * h), 0.3, "bias") if b.chance(0.6) else "")
    lens = ""
    if b.chance(0.3):
        lens = b.const(np.array([b.randint(0, t) for _ in range(n)], dtype=np.int32), "lens")
    ins.append(lens)
    state = (n, d, h) if layout else (d, n, h)
    for _ in range(2 if op == "LSTM" else 1):
        ins.append(b.weight(state, 0.5, "state") if b.chance(0.4) else "")
    if op == "LSTM":
        ins.append(b.weight((d, 3 * h), 0.5, "peep") if b.chance(0.3) else "")
        if b.chance(0.15):
            attrs["input_forget"] = 1
    if op == "GRU" and b.chance(0.5):
        attrs["linear_before_reset"] = 1
    if b.chance(0.2):
        attrs["clip"] = float(b.choice([0.5, 1.5, 3.0]))
    if b.chance(0.3):
        per = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
        acts = [RECURRENT_ACTS[b.randint(0, len(RECURRENT_ACTS) - 1)] for _ in range(per * d)]
        attrs["activations"] = [a for a, _, _ in acts]
        alphas = [a for _, a, _ in acts if a is not None]
        betas = [bb for name, _, bb in acts if bb is not None]
        if alphas:
            attrs["activation_alpha"] = alphas
        if betas:
            attrs["activation_beta"] = betas
    while ins and ins[-1] == "":
        ins.pop()
    y_shape = (n, t, d, h) if layout else (t, d, n, h)
    # Unbounded activations (Relu, Affine) grow the state step by step: a loose magnitude bound.
    mag = 1.0 if "activations" not in attrs else 4.0 ** min(t, 6)
    outs = [(y_shape, F32, mag, -mag), (state, F32, mag, -mag)]
    if op == "LSTM":
        outs.append((state, F32, 10.0 * t, -10.0 * t))
    vals = b.node(op, ins, outs, **attrs)
    return vals[0] if b.chance(0.6) else vals[1]
