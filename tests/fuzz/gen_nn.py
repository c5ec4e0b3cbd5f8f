"""Neural-network op families for gen_graph.py: MatMul/Gemm (weights, batched, attention, MLP),
Conv (grouped, depthwise, strided, dilated, explicit and auto padding; 3-D, inception blocks,
inverted residuals, squeeze-excitation), GridSample. Pools, reductions, Softmax, LayerNorm,
BatchNormalization and recurrent layers are in gen_norm.py."""
import math

import numpy as np

import gen_layout
import gen_ops as ops
from gen_graph import F32, I64, MAX_ELEMS, Skip, broadcast, numel
from gen_norm import batchnorm, layernorm, softmax  # noqa: F401 (gen_ops imports layernorm from here)

INF = math.inf
ODD_N = [1, 7, 16, 64, 66, 128, 130]


# ---------------------------------------------------------------- MatMul / Gemm

def matmul_weight(b, x, n=None, bias=None):
    """x @ W (+ bias): W a constant [K, N] scaled by 1/sqrt(K), as a linear layer."""
    k = x.shape[-1]
    n = n or b.choice(ODD_N + [b.randint(2, 40)])
    out = x.shape[:-1] + (n,) if x.rank >= 2 else (n,)
    if numel(out) > MAX_ELEMS or k * n > MAX_ELEMS:
        raise Skip()
    x = ops.tame(b, x, 100.0)
    y = b.op1("MatMul", [x, b.weight((k, n), 1 / math.sqrt(k))], out, 1.5 * x.mag + 1)
    if bias if bias is not None else b.chance(0.5):
        y = b.op1("Add", [y, b.weight((n,), 0.5, "bias")], out, y.mag + 2)
    return y


def fam_matmul(b):
    kind = b.choice(["weight", "left_weight", "vector", "gemm", "batched", "attention", "mlp"],
                    p=[4, 1, 1, 3, 3, 2, 2])
    if kind == "weight":
        return matmul_weight(b, b.pick(lambda v: v.rank >= 1 and v.shape[-1] <= 256))
    if kind == "left_weight":  # W [P, M] @ x [..., M, N]
        x = ops.tame(b, b.pick(lambda v: v.rank >= 2), 100.0)
        m, p = x.shape[-2], b.choice(ODD_N)
        out = x.shape[:-2] + (p, x.shape[-1])
        if numel(out) > MAX_ELEMS or p * m > MAX_ELEMS:
            raise Skip()
        return b.op1("MatMul", [b.weight((p, m), 1 / math.sqrt(m)), x], out, 1.5 * x.mag + 1)
    if kind == "vector":  # x [..., M, K] @ v [K]
        x = ops.tame(b, b.pick(lambda v: v.rank >= 2), 100.0)
        k = x.shape[-1]
        return b.op1("MatMul", [x, b.weight((k,), 1 / math.sqrt(k))], x.shape[:-1], 1.5 * x.mag + 1)
    if kind == "gemm":
        return gemm(b)
    if kind == "batched":
        return batched(b)
    if kind == "attention":
        return attention(b)
    x = b.pick(lambda v: v.rank >= 1 and v.shape[-1] <= 256)
    h = matmul_weight(b, x, b.choice([16, 64, 66, 130]), bias=True)
    h = ops.unary(b, h, b.choice(["Relu", "Gelu", "Swish", "GeluTanh", "Tanh"]))
    y = matmul_weight(b, h, x.shape[-1] if x.rank >= 1 and b.chance(0.6) else None, bias=True)
    if y.shape == x.shape and b.chance(0.6):
        y = b.op1("Add", [x, y], x.shape, x.mag + y.mag)
    return y


def gemm(b):
    x = b.pick(lambda v: v.rank >= 1)
    if x.rank != 2:
        x = gen_layout.flatten(b, x, 1 if x.rank > 1 and b.chance(0.7) else b.randint(0, x.rank))
    x = ops.tame(b, x, 100.0)
    trans_a = b.chance(0.15)
    k, m = (x.shape[0], x.shape[1]) if trans_a else (x.shape[1], x.shape[0])
    n = b.choice(ODD_N + [b.randint(2, 40)])
    if m * n > MAX_ELEMS or k * n > MAX_ELEMS:
        raise Skip()
    trans_b = b.chance(0.4)
    w = b.weight((n, k) if trans_b else (k, n), 1 / math.sqrt(k))
    alpha, beta = b.choice([1.0, 1.0, 0.5, 2.0]), b.choice([1.0, 1.0, 0.5, 2.0])
    c_shape = b.choice([None, (n,), (1, n), (m, n), (m, 1), ()])
    ins = [x, w] + ([b.weight(c_shape, 0.5, "bias")] if c_shape is not None else [])
    attrs = {}
    if trans_a:
        attrs["transA"] = 1
    if trans_b:
        attrs["transB"] = 1
    if alpha != 1.0:
        attrs["alpha"] = alpha
    if beta != 1.0 and c_shape is not None:
        attrs["beta"] = beta
    return b.op1("Gemm", ins, (m, n), 1.5 * alpha * x.mag + 2 * beta, **attrs)


def batched(b):
    """Activation x activation: x [..., M, K] @ y [..., K, N], y from the pool or a transposed value."""
    x = ops.tame(b, b.pick(lambda v: v.rank >= 2 and v.shape[-1] <= 256), 30.0)
    k = x.shape[-1]

    def fits(v, kdim):
        bt = broadcast(x.shape[:-2], v.shape[:-2])
        return v.rank >= 2 and v.shape[kdim] == k and bt is not None and numel(bt) * x.shape[-2] * (
            v.shape[-1] if kdim == -2 else v.shape[-2]) <= MAX_ELEMS

    try:
        y = b.pick(lambda v: v is not x and fits(v, -2))
    except Skip:
        z = b.pick(lambda v: fits(v, -1))  # often x itself: x @ x^T
        perm = list(range(z.rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        y = b.op1("Transpose", [z], tuple(z.shape[p] for p in perm), z.mag, z.lb, perm=perm)
    y = ops.tame(b, y, 30.0)
    out = broadcast(x.shape[:-2], y.shape[:-2]) + (x.shape[-2], y.shape[-1])
    mag = x.mag * y.mag * (k if x.lb >= 0 and y.lb >= 0 else math.sqrt(k) / 2)
    return b.op1("MatMul", [x, y], out, mag)


def attention(b, fused_qkv=False):
    """Scaled dot-product attention on [B, T, D]: one head, or heads split with Reshape/Transpose.
    fused_qkv: Q, K and V sliced out of one projection to 3 * dk columns (torchvision's
    MultiheadAttention export: in_proj, then Slice per operand)."""
    x = b.pick(lambda v: v.rank == 3 and v.shape[-1] <= 130 and v.shape[1] <= 64)
    bs, t, d = x.shape
    dk = b.choice([8, 16, d])
    heads = b.choice([h for h in (2, 4) if dk % h == 0] or [1]) if b.chance(0.5) else 1
    if bs * heads * t * t > MAX_ELEMS or bs * t * dk * (3 if fused_qkv else 1) > MAX_ELEMS:
        raise Skip()
    # Keys and values from a shorter sequence (every second or third token), as efficient
    # attention reads them (SegFormer, PVT: keys reduced to 49): score rows shorter than the
    # queries, the short-row passes of the chain emitter (ChainTile::row_jam).
    kv, tk = x, t
    if not fused_qkv and t >= 6 and b.chance(0.3):
        step = b.choice([2, 3])
        tk = (t + step - 1) // step
        kv = b.op1("Slice", [x, b.ints([0], "starts"), b.ints([t], "ends"), b.ints([1], "axes"), b.ints([step], "steps")],
                   (bs, tk, d), x.mag, x.lb)
    if fused_qkv:
        qkv = matmul_weight(b, x, 3 * dk)
        q, k, v = (b.op1("Slice", [qkv, b.ints([i * dk], "starts"), b.ints([(i + 1) * dk], "ends"), b.ints([2], "axes")],
                         (bs, t, dk), qkv.mag, qkv.lb) for i in range(3))
    else:
        q = matmul_weight(b, x, dk)
        k, v = (matmul_weight(b, kv, dk) for _ in range(2))
    if heads == 1:
        kt = b.op1("Transpose", [k], (bs, dk, tk), k.mag, perm=[0, 2, 1])
    else:
        dh = dk // heads
        q = b.op1("Reshape", [q, b.ints([bs, t, heads, dh], "shape")], (bs, t, heads, dh), q.mag)
        q = b.op1("Transpose", [q], (bs, heads, t, dh), q.mag, perm=[0, 2, 1, 3])
        kv_shape = b.ints([bs, tk, heads, dh], "shape")
        k = b.op1("Reshape", [k, kv_shape], (bs, tk, heads, dh), k.mag)
        kt = b.op1("Transpose", [k], (bs, heads, dh, tk), k.mag, perm=[0, 2, 3, 1])
        v = b.op1("Reshape", [v, kv_shape], (bs, tk, heads, dh), v.mag)
        v = b.op1("Transpose", [v], (bs, heads, tk, dh), v.mag, perm=[0, 2, 1, 3])
    lead = (bs,) if heads == 1 else (bs, heads)
    s = b.op1("MatMul", [q, kt], lead + (t, tk), q.mag * k.mag)
    scale = 1 / math.sqrt(dk // heads)
    if b.chance(0.5):
        s = b.op1("Mul", [s, b.scalar(scale)], s.shape, s.mag * scale)
    else:
        s = b.op1("Div", [s, b.scalar(1 / scale)], s.shape, s.mag * scale)
    p = softmax(b, s, -1)
    if b.chance(0.3):
        # Attention dropout as exporters leave it: inference mode, or torchvision's Swin's training
        # mode with p = 0 (both the identity, between the two MatMuls of the chain).
        r = 0.0 if b.chance(0.5) else 0.1
        training = b.const(np.array(r == 0.0 and b.chance(0.5)), "training")
        p = b.op1("Dropout", [p, b.scalar(r, "ratio", rank0=True), training], p.shape, p.mag, p.lb)
    o = b.op1("MatMul", [p, v], lead + (t, dk // heads), v.mag)
    if heads > 1:
        o = b.op1("Transpose", [o], (bs, t, heads, dk // heads), o.mag, perm=[0, 2, 1, 3])
        o = b.op1("Reshape", [o, b.ints([bs, t, dk] if b.chance(0.5) else [0, 0, -1], "shape")], (bs, t, dk), o.mag)
    if dk == d and b.chance(0.5):
        o = b.op1("Add", [x, o], x.shape, x.mag + o.mag)
    return o


# ---------------------------------------------------------------- Conv

def conv_out(n, k, s, d, pb, pe):
    return (n + pb + pe - (d * (k - 1) + 1)) // s + 1


def conv(b, x, same=False):
    """Conv on [N, C, spatial...]: groups 1, C (depthwise) or a divisor of C; `same` keeps the
    shape (stride 1, symmetric padding, as many output channels as input channels)."""
    c, spatial = x.shape[1], x.shape[2:]
    g = b.choice([1, c, b.choice([d for d in range(1, c + 1) if c % d == 0])], p=[5, 3, 2])
    if same:
        m = c
    elif g == c:
        m = c * b.choice([1, 1, 2])
    else:
        m = g * b.choice([1, 2, 4, 8, 16])
    if same:
        ks = [b.choice([1, 3, 5]) for _ in spatial]
        dil = [b.choice([1, 1, 2]) for _ in spatial]
        strides = [1] * len(spatial)
        pads = [d * (k - 1) // 2 for k, d in zip(ks, dil)] * 2
        auto = None
    else:
        ks = [b.choice([1, 2, 3, 3, 5, 7]) for _ in spatial]
        strides = [b.choice([1, 1, 2, 3]) for _ in spatial]
        dil = [b.choice([1, 1, 1, 2]) for _ in spatial]
        auto = b.choice([None, None, "SAME_UPPER", "SAME_LOWER", "VALID"])
        pads = [b.randint(0, k - 1) if k > 1 else 0 for k in ks for _ in (0,)]
        pads = pads + ([b.randint(0, k - 1) for k in ks] if b.chance(0.3) else pads)
        if auto is not None:
            pads = [0] * (2 * len(spatial))
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            # ONNX Runtime refuses dilated SAME convolutions, and strides above the kernel (the
            # spec's total padding goes negative): no oracle for those.
            dil = [1] * len(spatial)
            strides = [min(s, k) for s, k in zip(strides, ks)]
    r = len(spatial)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out_sp = [-(-n // s) for n, s in zip(spatial, strides)]
    else:
        out_sp = [conv_out(n, k, s, d, pads[i], pads[i + r])
                  for i, (n, k, s, d) in enumerate(zip(spatial, ks, strides, dil))]
    if min(out_sp) < 1 or (auto is None and any(d * (k - 1) + 1 > n + pads[i] + pads[i + r]
                                              for i, (n, k, d) in enumerate(zip(spatial, ks, dil)))):
        raise Skip()
    out = (x.shape[0], m) + tuple(out_sp)
    fan_in = c // g * numel(ks)
    if numel(out) > MAX_ELEMS or m * fan_in > MAX_ELEMS:
        raise Skip()
    x = ops.tame(b, x, 100.0)
    ins = [x, b.weight((m, c // g) + tuple(ks), 1 / math.sqrt(fan_in))]
    if b.chance(0.6):
        ins.append(b.weight((m,), 0.5, "bias"))
    attrs = {"kernel_shape": ks} if b.chance(0.7) else {}
    if auto is not None:
        attrs["auto_pad"] = auto
    elif any(pads) or b.chance(0.3):
        attrs["pads"] = pads
    if any(s != 1 for s in strides) or b.chance(0.2):
        attrs["strides"] = strides
    if any(d != 1 for d in dil) or b.chance(0.2):
        attrs["dilations"] = dil
    if g != 1:
        attrs["group"] = g
    return b.op1("Conv", ins, out, 1.5 * x.mag + 2, **attrs)


def fam_conv(b):
    x = b.pick(lambda v: v.rank == 4 or (v.rank == 3 and b.chance(0.3)))
    y = conv(b, x, same=b.chance(0.2))
    if b.chance(0.3):
        y = batchnorm(b, y)
    if b.chance(0.7):
        y = ops.unary(b, y, b.choice(["Relu", "Relu", "Clip", "HardSwish", "Swish", "LeakyRelu"]))
    if y.shape == x.shape and b.chance(0.4):
        y = b.op1("Add", [y, x], y.shape, y.mag + x.mag)
    return y


def fam_wide_conv(b):
    """A group-1 conv with a 3x3 or 5x5 window and 64-96 output channels over a map of at least 128
    positions (kiln's implicit GEMM over phase planes; with the output channels as rows only
    beyond 16 x L2 of planes or under strict numerics: lower_contraction_implicit.cc
    window_channel_rows), strided, dilated or asymmetrically padded at times, with a bias, an
    activation and sometimes a residual."""
    x = b.pick(lambda v: v.rank == 4 and v.shape[2] * v.shape[3] >= 128 and v.shape[1] <= 96)
    n, c, h, w = x.shape
    m = b.choice([64, 72, 96])
    k = b.choice([3, 3, 5])
    s = b.choice([1, 1, 2])
    d = b.choice([1, 1, 1, 2])
    pb = [b.randint(0, d * (k - 1)) for _ in range(2)]
    pe = [b.randint(0, d * (k - 1)) for _ in range(2)] if b.chance(0.3) else list(pb)
    ho, wo = conv_out(h, k, s, d, pb[0], pe[0]), conv_out(w, k, s, d, pb[1], pe[1])
    if min(ho, wo) < 1 or m * c * k * k > MAX_ELEMS or n * m * ho * wo > MAX_ELEMS:
        raise Skip()
    x = ops.tame(b, x, 10.0)
    ins = [x, b.weight((m, c, k, k), 1 / math.sqrt(c * k * k))]
    if b.chance(0.7):
        ins.append(b.weight((m,), 0.5, "bias"))
    y = b.op1("Conv", ins, (n, m, ho, wo), 1.5 * x.mag + 2, kernel_shape=[k, k], pads=pb + pe, strides=[s, s],
              dilations=[d, d])
    if b.chance(0.6):
        y = ops.unary(b, y, b.choice(["Relu", "Clip", "HardSwish", "Swish"]))
    if b.chance(0.3):
        r = b.graph_input(y.shape) if b.chance(0.5) else y
        y = b.op1("Add", [y, r], y.shape, 2 * y.mag)
    return y


def fam_conv_chain(b):
    """Convs reading convs (ResNet's basic block, VGG's stacks): a group-1 conv, an activation, then
    a stride-1 3x3 or 5x5 conv of 16-64 channels (dilated or asymmetrically padded at times), a
    residual Add of the block's input at times, and at times a second reader of the inner value
    (an Add, a pool, another stride-1 conv with the same or other padding). kiln stores the value
    between two such convs channels-last with the second conv's padding around it, which that conv
    reads in place (fusion/assign_layouts.h); the other readers decide whether it may."""
    x = b.pick(lambda v: v.rank == 4 and v.shape[2] * v.shape[3] >= 16 and v.shape[1] <= 64)
    n, c, h, w = x.shape
    m = b.choice([16, 24, 32, 64])
    k1, s1 = b.choice([1, 3, 3]), b.choice([1, 1, 2])
    p1 = k1 // 2
    h1, w1 = conv_out(h, k1, s1, 1, p1, p1), conv_out(w, k1, s1, 1, p1, p1)
    k2, d2 = b.choice([3, 3, 5]), b.choice([1, 1, 2])
    pb = [d2 * (k2 - 1) // 2] * 2 if b.chance(0.7) else [b.randint(0, d2 * (k2 - 1)) for _ in range(2)]
    pe = list(pb) if b.chance(0.8) else [b.randint(0, d2 * (k2 - 1)) for _ in range(2)]
    h2, w2 = conv_out(h1, k2, 1, d2, pb[0], pe[0]), conv_out(w1, k2, 1, d2, pb[1], pe[1])
    if min(h1, w1, h2, w2) < 1 or n * m * max(h1 * w1, h2 * w2) > MAX_ELEMS or m * max(c, m) * 25 > MAX_ELEMS:
        raise Skip()
    x = ops.tame(b, x, 10.0)
    ins = [x, b.weight((m, c, k1, k1), 1 / math.sqrt(c * k1 * k1)), b.weight((m,), 0.5, "bias")]
    a = b.op1("Conv", ins, (n, m, h1, w1), 1.5 * x.mag + 2, kernel_shape=[k1, k1], pads=[p1] * 4, strides=[s1, s1])
    a = ops.unary(b, a, b.choice(["Relu", "Relu", "Clip", "LeakyRelu"]))
    ins = [a, b.weight((m, m, k2, k2), 1 / math.sqrt(m * k2 * k2))]
    if b.chance(0.7):
        ins.append(b.weight((m,), 0.5, "bias"))
    y = b.op1("Conv", ins, (n, m, h2, w2), 1.5 * a.mag + 2, kernel_shape=[k2, k2], pads=pb + pe, dilations=[d2, d2])
    if (h2, w2) == (h1, w1) and b.chance(0.5):
        y = b.op1("Add", [y, a], y.shape, y.mag + a.mag)
    if b.chance(0.6):
        y = ops.unary(b, y, "Relu")
    if b.chance(0.3):
        # A second reader of the inner value: a stride-1 conv (its padding the same or not), a pool.
        if b.chance(0.5):
            z = b.op1("Conv", [a, b.weight((m, m, 3, 3), 1 / math.sqrt(m * 9))], (n, m, h1, w1), 1.5 * a.mag + 2,
                      kernel_shape=[3, 3], pads=[1, 1, 1, 1] if b.chance(0.7) else [0, 0, 2, 2])
        else:
            z = b.op1("MaxPool", [a], (n, m, h1, w1), a.mag, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        if z.shape == y.shape:
            y = b.op1("Add", [y, z], y.shape, y.mag + z.mag)
    return y


def depthwise_conv(b, x, kh, kw, s, d, pads, out_hw, mag):
    """A depthwise Conv of x (every channel its own group) with a kh x kw window, stride s and
    dilation d on both axes, `pads` as ONNX writes them, a bias at times."""
    n, c = x.shape[0], x.shape[1]
    ins = [x, b.weight((c, 1, kh, kw), 1 / math.sqrt(kh * kw))]
    if b.chance(0.7):
        ins.append(b.weight((c,), 0.5, "bias"))
    attrs = {"kernel_shape": [kh, kw], "pads": pads, "group": c}
    if s != 1:
        attrs["strides"] = [s, s]
    if d != 1:
        attrs["dilations"] = [d, d]
    return b.op1("Conv", ins, (n, c) + tuple(out_hw), mag, **attrs)


def fam_depthwise_rows(b):
    """A depthwise conv (3x3 to 7x7, rectangles at times; stride 1, sometimes dilated or strided)
    over rows of 12-40 positions: the rows kiln sums through its depthwise micro-kernel
    (lower_conv_stencil.cc, kernels/depthwise.h) — each output row block's tail, rows past the
    plane's width, asymmetric padding — with a bias, an activation and sometimes a residual."""
    n, c = 1, b.choice([1, 3, 8, 16, 24])
    h, w = b.randint(1, 20), b.randint(12, 40)
    kh = b.choice([3, 5, 7])
    kw = kh if b.chance(0.7) else b.choice([3, 5, 7])
    s = 1 if b.chance(0.8) else 2
    d = 1 if b.chance(0.8) else 2
    if b.chance(0.7):
        pads = [d * (kh - 1) // 2, d * (kw - 1) // 2] * 2
    else:
        pads = [b.randint(0, d * (kh - 1)), b.randint(0, d * (kw - 1)), b.randint(0, d * (kh - 1)), b.randint(0, d * (kw - 1))]
    ho, wo = conv_out(h, kh, s, d, pads[0], pads[2]), conv_out(w, kw, s, d, pads[1], pads[3])
    if min(ho, wo) < 1 or d * (kh - 1) + 1 > h + pads[0] + pads[2] or d * (kw - 1) + 1 > w + pads[1] + pads[3]:
        raise Skip()
    if n * c * h * w > MAX_ELEMS:
        raise Skip()
    x = None
    if b.chance(0.3):
        try:
            x = b.pick(lambda v: v.shape == (n, c, h, w))
        except Skip:
            x = None
    if x is None:
        x = b.graph_input((n, c, h, w))
    y = depthwise_conv(b, ops.tame(b, x, 10.0), kh, kw, s, d, pads, (ho, wo), 1.5 * x.mag + 2)
    if b.chance(0.6):
        y = ops.unary(b, y, b.choice(["Relu", "Clip", "HardSwish", "Swish"]))
    if b.chance(0.3):
        r = b.graph_input(y.shape) if y.shape != x.shape or b.chance(0.5) else x
        y = b.op1("Add", [y, r], y.shape, y.mag + r.mag)
    return y


def fam_narrow_windows(b):
    """Windows over small maps (rows narrower than 12): a depthwise conv of 16, 32 or 48 channels
    (kiln's channel-blocked stencil: the blocked micro-kernel under the default numerics and the
    transposing copies in and out, lower_conv_stencil.cc), sometimes of a computed input (the
    element-wise staging) or strided (the gathered rows), at times a grouped conv of 2-16 channels
    per group instead (the grouped-conv micro-kernel; 16: the per-group implicit GEMM), or a group-1 conv with a tall window (7x1,
    5x1, 3x1) whose outer kernel rows read the padding above or below (the flat tiles that skip
    them, lower_contraction_implicit.cc); an activation, sometimes a residual."""
    n, c = 1, b.choice([16, 32, 48])
    h, w = b.randint(2, 17), b.randint(2, 11)  # rows narrower than 12: channel blocks
    if b.chance(0.5):
        kh = kw = b.choice([3, 5, 7])
        s = 1 if b.chance(0.7) else 2
        d = 1 if b.chance(0.8) else 2
        pads = [d * (kh - 1) // 2, d * (kw - 1) // 2] * 2 if b.chance(0.7) else \
            [b.randint(0, d * (kh - 1)), b.randint(0, d * (kw - 1)), b.randint(0, d * (kh - 1)), b.randint(0, d * (kw - 1))]
        ho, wo = conv_out(h, kh, s, d, pads[0], pads[2]), conv_out(w, kw, s, d, pads[1], pads[3])
        if min(ho, wo) < 1 or d * (kh - 1) + 1 > h + pads[0] + pads[2] or d * (kw - 1) + 1 > w + pads[1] + pads[3]:
            raise Skip()
        x = b.graph_input((n, c, h, w))
        if b.chance(0.3):
            x = ops.unary(b, x, b.choice(["Relu", "Sigmoid", "Neg"]))
        if b.chance(0.3):
            # A grouped conv (RegNet/ResNeXt style): 2-8 channels per group take the grouped-conv
            # micro-kernel over the plane stencil, 16 the per-group implicit GEMM through the
            # segmented micro-kernel (lower_conv_stencil.cc)
            cg = b.choice([2, 4, 8, 16])
            ins = [ops.tame(b, x, 10.0), b.weight((c, cg, kh, kw), 1 / math.sqrt(cg * kh * kw))]
            if b.chance(0.7):
                ins.append(b.weight((c,), 0.5, "bias"))
            attrs = {"kernel_shape": [kh, kw], "pads": pads, "group": c // cg, "strides": [s, s], "dilations": [d, d]}
            y = b.op1("Conv", ins, (n, c, ho, wo), 1.5 * x.mag + 2, **attrs)
        else:
            y = depthwise_conv(b, ops.tame(b, x, 10.0), kh, kw, s, d, pads, (ho, wo), 1.5 * x.mag + 2)
    else:
        kh = b.choice([3, 5, 7])
        ph = kh // 2 if b.chance(0.8) else b.randint(0, kh - 1)
        h = max(h, kh)
        # 96 or 128 input channels: a K segment (a kernel row's channels) of more than two thirds
        # of the K block, one segment per call, the calls a tile may skip
        c = b.choice([16, 32, 96, 128])
        m = b.choice([16, 32, 40])
        ho = conv_out(h, kh, 1, 1, ph, ph)
        if ho < 1 or m * c * kh > MAX_ELEMS:
            raise Skip()
        x = ops.tame(b, b.graph_input((n, c, h, w)), 10.0)
        ins = [x, b.weight((m, c, kh, 1), 1 / math.sqrt(c * kh))]
        if b.chance(0.7):
            ins.append(b.weight((m,), 0.5, "bias"))
        y = b.op1("Conv", ins, (n, m, ho, w), 1.5 * x.mag + 2, kernel_shape=[kh, 1], pads=[ph, 0, ph, 0])
    if b.chance(0.7):
        y = ops.unary(b, y, b.choice(["Relu", "Clip", "HardSwish", "Swish"]))
    if b.chance(0.3):
        r = b.graph_input(y.shape)
        y = b.op1("Add", [y, r], y.shape, y.mag + r.mag)
    return y


def fam_grouped_conv(b):
    """A grouped conv (RegNet, ResNeXt, a channel multiplier): 2-32 input channels per group, as
    many or twice as many output channels, maps up to 20 wide, 1x1, 3x3 or 5x5 windows, strides,
    dilation and asymmetric padding, sometimes of a computed input, then a bias, an activation and
    a residual. kiln's plane stencil (lower_conv_stencil.cc) sums groups of 2-8 channels through
    the grouped-conv micro-kernel and groups of 16 or more with whole vectors of output channels as
    a per-group implicit GEMM through the segmented micro-kernel."""
    n = 1 if b.chance(0.8) else 2
    cg = b.choice([2, 4, 8, 16, 16, 24, 32])
    mg = cg * (1 if b.chance(0.7) else 2)
    groups = b.randint(2, 4)
    c, m = cg * groups, mg * groups
    k = b.choice([1, 3, 3, 5])
    s = 1 if b.chance(0.6) else 2
    d = 1 if b.chance(0.8) or k == 1 else 2
    h, w = b.randint(k, 20), b.randint(k, 20)
    pads = [d * (k - 1) // 2] * 4 if b.chance(0.7) else [b.randint(0, d * (k - 1)) for _ in range(4)]
    ho, wo = conv_out(h, k, s, d, pads[0], pads[2]), conv_out(w, k, s, d, pads[1], pads[3])
    if min(ho, wo) < 1 or d * (k - 1) + 1 > min(h + pads[0] + pads[2], w + pads[1] + pads[3]):
        raise Skip()
    if n * max(c * h * w, m * ho * wo) > MAX_ELEMS or m * cg * k * k > MAX_ELEMS:
        raise Skip()
    x = b.graph_input((n, c, h, w))
    if b.chance(0.3):
        x = ops.unary(b, x, b.choice(["Relu", "Sigmoid", "Neg"]))
    ins = [ops.tame(b, x, 10.0), b.weight((m, cg, k, k), 1 / math.sqrt(cg * k * k))]
    if b.chance(0.7):
        ins.append(b.weight((m,), 0.5, "bias"))
    attrs = {"kernel_shape": [k, k], "pads": pads, "group": groups, "strides": [s, s], "dilations": [d, d]}
    y = b.op1("Conv", ins, (n, m, ho, wo), 1.5 * x.mag + 2, **attrs)
    if b.chance(0.7):
        y = ops.unary(b, y, b.choice(["Relu", "Clip", "Swish"]))
    if b.chance(0.3):
        r = b.graph_input(y.shape)
        y = b.op1("Add", [y, r], y.shape, y.mag + r.mag)
    return y


def fam_patch_conv(b):
    """Convs of exported models with their padding spelled apart or their windows tiling the input:
    a patch embedding (kernel = stride, no padding: ViT's 16x16, CLIP's 32x32, Swin's 4x4, and
    rectangles; rows and columns past the last whole patch left out), or a conv behind an explicit
    Pad of zeros on the spatial axes (TensorFlow SAME padding as Hugging Face and tf2onnx export it:
    asymmetric, sometimes of width 0, before a conv that may pad too). kiln reads a patch conv's
    input in place (lower_contraction_implicit.cc, patch_conv_view) and folds such a Pad into the
    conv's pads (transforms/fold_pad_into_conv.cc). Sometimes of a computed input, then a bias and
    an activation."""
    n = 1 if b.chance(0.8) else 2
    c = b.choice([1, 3, 3, 4, 8, 24])
    m = b.choice([8, 16, 32, 48])
    shape = (n, c, b.randint(4, 40), b.randint(4, 40))
    if n * c * (shape[2] + 4) * (shape[3] + 4) > MAX_ELEMS:  # with the Pad's widest border
        raise Skip()
    x = b.graph_input(shape)
    if b.chance(0.3):
        x = ops.unary(b, x, b.choice(["Relu", "Sigmoid", "Neg"]))
    h, w = x.shape[2], x.shape[3]
    if b.chance(0.5):
        kh = b.choice([2, 4, 7, 8, 16])
        kw = kh if b.chance(0.7) else b.choice([2, 4, 8])
        kh, kw = min(kh, h), min(kw, w)
        ks, strides, pads = [kh, kw], [kh, kw], [0, 0, 0, 0]
        ho, wo = h // kh, w // kw
    else:
        pp = [0, 0] + [b.randint(0, 2) for _ in range(2)] + [0, 0] + [b.randint(0, 2) for _ in range(2)]
        x = b.op1("Pad", [x, b.ints(pp, "pads")], (n, c, h + pp[2] + pp[6], w + pp[3] + pp[7]), max(x.mag, 2.5),
                  min(x.lb, 0.0))
        h, w = x.shape[2], x.shape[3]
        k = b.choice([1, 3, 3, 5])
        s = b.choice([1, 2])
        pads = [b.randint(0, 1) for _ in range(4)] if b.chance(0.3) else [0, 0, 0, 0]
        ks, strides = [k, k], [s, s]
        ho, wo = conv_out(h, k, s, 1, pads[0], pads[2]), conv_out(w, k, s, 1, pads[1], pads[3])
    if min(ho, wo) < 1:
        raise Skip()
    fan_in = c * ks[0] * ks[1]
    if n * max(c * h * w, m * ho * wo) > MAX_ELEMS or m * fan_in > MAX_ELEMS:
        raise Skip()
    ins = [ops.tame(b, x, 10.0), b.weight((m, c) + tuple(ks), 1 / math.sqrt(fan_in))]
    if b.chance(0.7):
        ins.append(b.weight((m,), 0.5, "bias"))
    attrs = {"kernel_shape": ks, "strides": strides}
    if any(pads):
        attrs["pads"] = pads
    y = b.op1("Conv", ins, (n, m, ho, wo), 1.5 * x.mag + 2, **attrs)
    if b.chance(0.6):
        y = ops.unary(b, y, b.choice(["Relu", "Clip", "Swish"]))
    return y


def fam_inverted_residual(b):
    """MobileNet's block: a 1x1 expansion, an activation, a depthwise conv (3x3 or 5x5, stride 1 or 2,
    sometimes dilated or asymmetric padding), an activation, sometimes a 1x1 projection with a
    residual (kiln fuses the expansion into the depthwise conv: lower_pointwise_depthwise.cc)."""
    x = b.pick(lambda v: v.rank == 4 and v.shape[1] <= 32)
    n, c, h, w = x.shape
    e = c * b.choice([2, 3, 4, 6])
    if b.chance(0.3):  # a multiple of 16: the channel-blocked stencil of narrow rows (lower_conv_stencil.cc)
        e = -(-e // 16) * 16
    if n * e * h * w > MAX_ELEMS or e * c > MAX_ELEMS:
        raise Skip()
    x = ops.tame(b, x, 10.0)
    ins = [x, b.weight((e, c, 1, 1), 1 / math.sqrt(c))]
    if b.chance(0.7):
        ins.append(b.weight((e,), 0.5, "bias"))
    y = b.op1("Conv", ins, (n, e, h, w), 1.5 * x.mag + 2, kernel_shape=[1, 1])
    y = ops.unary(b, y, b.choice(["Relu", "Clip", "HardSwish", "Swish"]))
    k = b.choice([3, 3, 5])
    s = b.choice([1, 1, 2])
    d = b.choice([1, 1, 1, 2])
    pb = d * (k - 1) // 2
    pads = [pb, pb, pb, pb] if b.chance(0.8) else [b.randint(0, pb) for _ in range(4)]
    ho, wo = conv_out(h, k, s, d, pads[0], pads[2]), conv_out(w, k, s, d, pads[1], pads[3])
    if min(ho, wo) < 1 or d * (k - 1) + 1 > min(h + pads[0] + pads[2], w + pads[1] + pads[3]):
        raise Skip()
    z = depthwise_conv(b, y, k, k, s, d, pads, (ho, wo), k * y.mag + 2)
    if b.chance(0.7):
        z = ops.unary(b, z, b.choice(["Relu", "Clip", "HardSwish", "Swish"]))
    if b.chance(0.5):
        z = b.op1("Conv", [ops.tame(b, z, 10.0), b.weight((c, e, 1, 1), 1 / math.sqrt(e))], (n, c, ho, wo), 12.0,
                  kernel_shape=[1, 1])
        if z.shape == x.shape and b.chance(0.6):
            z = b.op1("Add", [z, x], z.shape, z.mag + x.mag)
    return z


def fam_fused_qkv_attention(b):
    """Attention whose Q, K and V are slices of one projection (drawn only when asked: run_fuzz.py
    --weight fam_fused_qkv_attention=W). Kᵀ is then a head's slice of the fused tensor read along
    k, which the chain packs by one transposing copy once its view's div/mod fold."""
    return attention(b, fused_qkv=True)


def fam_conv3d(b):
    """A 3-D conv over a new 5-D input (a video model's 3x3x3, stride, dilation and padding along
    depth at times, asymmetric at times): kiln's lower_conv3d makes a window along depth and the
    plane a 2-D conv over the output frames (depth taps as input channels); a window along one
    of them stays a planar conv, a grouped one the generic form. A bias, an activation and
    sometimes a residual. Drawn only when asked (run_fuzz.py --weight fam_conv3d=W)."""
    n, c = b.choice([1, 1, 2]), b.choice([1, 3, 4, 8, 16])
    t, h, w = b.randint(2, 6), b.randint(3, 9), b.randint(3, 9)
    ks = [b.choice([1, 2, 3, 3]), b.choice([1, 3, 3]), b.choice([1, 2, 3])]
    strides = [b.choice([1, 1, 2]) for _ in range(3)]
    dil = [b.choice([1, 1, 1, 2]) for _ in range(3)]
    pb = [b.randint(0, d * (k - 1)) for k, d in zip(ks, dil)]
    pe = [b.randint(0, d * (k - 1)) for k, d in zip(ks, dil)] if b.chance(0.3) else list(pb)
    g = 2 if c % 2 == 0 and b.chance(0.15) else 1
    m = b.choice([4, 8, 16, 32, 40]) * g
    out_sp = [conv_out(nn_, k, s, d, p0, p1) for nn_, k, s, d, p0, p1 in zip((t, h, w), ks, strides, dil, pb, pe)]
    if min(out_sp) < 1 or n * m * numel(out_sp) > MAX_ELEMS or m * c * numel(ks) > MAX_ELEMS:
        raise Skip()
    x = b.graph_input((n, c, t, h, w))
    fan_in = c // g * numel(ks)
    ins = [x, b.weight((m, c // g) + tuple(ks), 1 / math.sqrt(fan_in))]
    if b.chance(0.6):
        ins.append(b.weight((m,), 0.5, "bias"))
    attrs = {"kernel_shape": ks, "pads": pb + pe, "strides": strides, "dilations": dil}
    if g != 1:
        attrs["group"] = g
    y = b.op1("Conv", ins, (n, m) + tuple(out_sp), 1.5 * x.mag + 2, **attrs)
    if b.chance(0.6):
        y = ops.unary(b, y, b.choice(["Relu", "Clip", "Swish"]))
    if b.chance(0.3):
        y = b.op1("Add", [y, b.graph_input(y.shape)], y.shape, y.mag + 4)
    return y


def fam_grid_sample(b):
    """GridSample (RAFT's correlation lookups, spatial transformers): a 4-D value sampled at a grid
    that a new input gives (its values past [-1, 1] at times, so that the padding modes matter),
    sometimes scaled by a computed value first; every mode, padding mode and align_corners. kiln
    decomposes it into coordinate arithmetic and GatherElements (decompose_grid_sample). Drawn
    only when asked (run_fuzz.py --weight fam_grid_sample=W)."""
    x = b.pick(lambda v: v.rank == 4 and numel(v.shape) <= MAX_ELEMS // 4)
    n, c = x.shape[0], x.shape[1]
    ho, wo = b.randint(1, 12), b.randint(1, 12)
    if n * c * ho * wo > MAX_ELEMS:
        raise Skip()
    grid = b.graph_input((n, ho, wo, 2))
    # Grid values (standard normal) reach past the input about a third of the time; scaled down,
    # most land inside.
    if b.chance(0.5):
        grid = b.op1("Mul", [grid, b.scalar(b.choice([0.3, 0.6, 1.5]))], grid.shape, grid.mag)
    mode = b.choice(["bilinear", "bilinear", "nearest", "bicubic"])
    padding = b.choice(["zeros", "zeros", "border", "reflection"])
    align = int(b.chance(0.5))
    x = ops.tame(b, x, 10.0)
    # Bicubic's weights overshoot (up to 1.27 summed over a row, as much along the columns).
    mag = x.mag * (1.7 if mode == "bicubic" else 1.0)
    return b.op1("GridSample", [x, grid], (n, c, ho, wo), mag, mode=mode, padding_mode=padding, align_corners=align)


def fam_squeeze_excitation(b):
    """Squeeze-excitation (EfficientNet, MobileNetV3, RegNetY): a global pool, two 1x1 convs with
    an activation between, a sigmoid (or hard sigmoid) and the input scaled per channel, usually
    then a 1x1 projection (kiln folds the scale into its weights, lower_contraction_gemm.cc) and
    sometimes a residual. Any batch (the fold takes batch 1 only), the scale on either side."""
    x = b.pick(lambda v: v.rank == 4 and v.shape[1] >= 2)
    n, c, h, w = x.shape
    r = max(1, c // b.choice([2, 4, 8]))
    x = ops.tame(b, x, 10.0)
    p = b.op1("GlobalAveragePool", [x], (n, c, 1, 1), x.mag)
    ins = [p, b.weight((r, c, 1, 1), 1 / math.sqrt(c))]
    if b.chance(0.8):
        ins.append(b.weight((r,), 0.5, "bias"))
    f = b.op1("Conv", ins, (n, r, 1, 1), 1.5 * p.mag + 2, kernel_shape=[1, 1])
    f = ops.unary(b, f, b.choice(["Relu", "Swish", "HardSwish"]))
    ins = [ops.tame(b, f, 10.0), b.weight((c, r, 1, 1), 1 / math.sqrt(r))]
    if b.chance(0.8):
        ins.append(b.weight((c,), 0.5, "bias"))
    g = b.op1("Conv", ins, (n, c, 1, 1), 12.0, kernel_shape=[1, 1])
    s = ops.unary(b, g, b.choice(["Sigmoid", "Sigmoid", "HardSigmoid"]))
    y = b.op1("Mul", [x, s] if b.chance(0.7) else [s, x], x.shape, x.mag)
    if b.chance(0.7):
        m = b.choice([max(1, c // 2), c, 2 * c, 24])
        if n * m * h * w > MAX_ELEMS or m * c > MAX_ELEMS:
            raise Skip()
        ins = [y, b.weight((m, c, 1, 1), 1 / math.sqrt(c))]
        if b.chance(0.7):
            ins.append(b.weight((m,), 0.5, "bias"))
        y = b.op1("Conv", ins, (n, m, h, w), 1.5 * y.mag + 2, kernel_shape=[1, 1])
        if m == c and b.chance(0.5):
            y = b.op1("Add", [y, x], y.shape, y.mag + x.mag)
    return y


def fam_inception(b):
    """An inception block: 2-4 branches over one input (a conv, a conv after a 1x1 conv, a 3x3
    max-pool, an activation of the input), each usually with its activation, concatenated along the
    channels (along another axis at times), then read by one or two consumers. At batch 1 with
    computed parts kiln builds the Concat in place (fusion/concat_in_place.h): the branches write
    their slices; a branch value sometimes also feeds a later op (a part with other readers)."""
    x = b.pick(lambda v: v.rank == 4 and v.shape[1] <= 48)
    n, c, h, w = x.shape
    x = ops.tame(b, x, 10.0)
    parts = []
    for _ in range(b.randint(2, 4)):
        kind = b.choice(["conv", "conv2", "pool", "act"], p=[4, 2, 2, 1])
        if kind == "pool":
            y = b.op1("MaxPool", [x], x.shape, x.mag, x.lb, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        elif kind == "act":
            y = ops.unary(b, x, b.choice(["Relu", "Sigmoid", "Tanh"]))
        else:
            y = x
            for _ in range(2 if kind == "conv2" else 1):
                m = b.choice([4, 8, 16, 24])
                k = b.choice([1, 3, 3, 5]) if y is not x or kind == "conv" else 1
                if n * m * h * w > MAX_ELEMS or m * y.shape[1] * k * k > MAX_ELEMS:
                    raise Skip()
                ins = [ops.tame(b, y, 10.0), b.weight((m, y.shape[1], k, k), 1 / math.sqrt(y.shape[1] * k * k))]
                if b.chance(0.7):
                    ins.append(b.weight((m,), 0.5, "bias"))
                y = b.op1("Conv", ins, (n, m, h, w), 1.5 * min(y.mag, 10.0) + 2, kernel_shape=[k, k],
                          pads=[k // 2] * 4)
                if b.chance(0.8):
                    y = ops.unary(b, y, b.choice(["Relu", "Relu", "Clip", "HardSwish"]))
        parts.append(y)
    axis = 1 if b.chance(0.8) else b.choice([2, 3])
    if axis != 1 and len({p.shape[1] for p in parts}) > 1:
        axis = 1
    out = list(parts[0].shape)
    out[axis] = sum(p.shape[axis] for p in parts)
    if numel(out) > MAX_ELEMS:
        raise Skip()
    cat = b.op1("Concat", parts, tuple(out), max(p.mag for p in parts), min(p.lb for p in parts), axis=axis)
    y = ops.unary(b, cat, b.choice(["Relu", "Sigmoid", "Neg"]))
    if b.chance(0.5):
        b.op1("MaxPool", [cat], cat.shape, cat.mag, cat.lb, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    if b.chance(0.3):
        p = parts[b.randint(0, len(parts) - 1)]
        b.op1("Mul", [p, p], p.shape, p.mag * p.mag, 0.0)
    return y
