#!/usr/bin/python3
"""Seeded generator of random valid ONNX graphs for differential testing (NNSmith/Csmith style).

    gen_graph.py SEED OUTDIR        writes OUTDIR/model.onnx and OUTDIR/<input name>.npy
    gen_graph.py --self-test N [S]  generates seeds S..S+N-1, checks each (full ONNX check, shapes the
                                    generator believes against ONNX shape inference, determinism)

The same seed always gives the same model bytes and input data (numpy's legacy RandomState, whose
stream numpy keeps frozen, drives every choice; nothing iterates a set or hashes a string).

How a graph grows: a pool of float values with known static shapes starts with 1-3 graph inputs;
each step picks an op family (gen_ops.py) that takes values from the pool (recent and not yet
consumed ones preferred, so chains get deep, but older ones too, so values get several consumers),
adds one or more nodes and puts its results back. Values nobody consumed become graph outputs.

Numerical validity: every value carries `mag`, a rough estimate of its largest magnitude, and `lb`,
a lower bound that holds by construction (e.g. Abs(x) + 0.5 >= 0.5). Ops with a domain (Log,
Sqrt, Div, Pow with a fractional or negative exponent, Reciprocal) get an operand whose `lb`
satisfies it, inserting a positivity-making subgraph when needed; ops that blow up (Exp, Pow,
products) get an operand whose `mag` is small, inserting a squashing op when needed. So outputs
stay finite and well conditioned and a mismatch means a wrong result, not float noise.
"""
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17           # LayerNormalization is opset 17; kiln's libonnx and onnx 1.12 know up to 17
MAX_ELEMS = 65536    # per tensor, so each graph runs in milliseconds
MAX_NODES = 48

F32, BOOL, I64 = "f32", "bool", "i64"
ONNX_TYPE = {F32: TensorProto.FLOAT, BOOL: TensorProto.BOOL, I64: TensorProto.INT64}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def broadcast(a, b):
    """Numpy broadcast of two shapes, or None when they do not broadcast."""
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


UNARY_EW = {"Relu", "Sigmoid", "Tanh", "Erf", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "LeakyRelu", "Elu",
            "HardSigmoid", "HardSwish", "Softplus", "Clip"}
BROADCAST_EW = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Greater", "Less",
                "GreaterOrEqual"}


class Skip(Exception):
    """An op family found nothing in the pool it can apply to; the step picks another family."""


class Val:
    __slots__ = ("name", "shape", "dtype", "mag", "lb", "uses")

    def __init__(self, name, shape, dtype=F32, mag=4.0, lb=-math.inf):
        self.name, self.shape, self.dtype = name, tuple(int(d) for d in shape), dtype
        self.mag, self.lb, self.uses = float(mag), float(lb), 0

    @property
    def rank(self):
        return len(self.shape)


class Builder:
    def __init__(self, seed):
        self.seed = seed
        self.r = np.random.RandomState(seed)
        self.nodes, self.inits, self.inputs, self.pool = [], [], [], []
        self.values = {}       # name -> Val, every value the generator made (for the shape self-check)
        self.input_data = {}   # graph input name -> ndarray
        self.const_shapes = {}  # constant name -> shape
        self._n = 0

    # ---- random helpers (all through self.r) ----
    def chance(self, p):
        return self.r.random_sample() < p

    def choice(self, seq, p=None):
        if p is not None:
            p = np.asarray(p, dtype=np.float64)
            p = p / p.sum()
        return seq[int(self.r.choice(len(seq), p=p))]

    def randint(self, lo, hi):  # inclusive
        return int(self.r.randint(lo, hi + 1))

    def fresh(self, prefix):
        self._n += 1
        return f"{prefix}_{self._n}"

    # ---- graph pieces ----
    def graph_input(self, shape, positive=False):
        name = self.fresh("in")
        if positive:
            data = self.r.uniform(0.5, 2.0, size=shape).astype(np.float32)
            v = Val(name, shape, F32, mag=2.0, lb=0.5)
        else:
            data = self.r.standard_normal(size=shape).astype(np.float32)
            v = Val(name, shape, F32, mag=4.0)
        self.inputs.append(v)
        self.input_data[name] = data
        self.values[name] = v
        self.pool.append(v)
        return v

    def const(self, arr, hint="c"):
        """A constant operand: an initializer, or (sometimes) a Constant node as exporters write."""
        arr = np.array(arr, copy=True)  # (ascontiguousarray would make a rank-0 array rank 1)
        name = self.fresh(hint)
        self.const_shapes[name] = arr.shape
        if self.chance(0.2):
            self.nodes.append(helper.make_node("Constant", [], [name], name=self.fresh("Constant"),
                                               value=numpy_helper.from_array(arr, name)))
        else:
            self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def ints(self, values, hint="i"):
        return self.const(np.array(values, dtype=np.int64), hint)

    def floats(self, values, hint="c"):
        return self.const(np.array(values, dtype=np.float32), hint)

    def scalar(self, x, hint="s", rank0=None):
        if rank0 is None:
            rank0 = self.chance(0.7)
        return self.const(np.array(x if rank0 else [x], dtype=np.float32), hint)

    def weight(self, shape, scale=1.0, hint="w"):
        return self.const((self.r.standard_normal(size=shape) * scale).astype(np.float32), hint)

    def node(self, op, ins, outs_meta, **attrs):
        """Adds one node. `ins`: names or Vals ('' for an omitted optional input); `outs_meta`: one
        (shape, dtype, mag, lb) per output. Returns the output Vals, put into the pool."""
        names = []
        for x in ins:
            if isinstance(x, Val):
                x.uses += 1
                names.append(x.name)
            else:
                names.append(x)
        if op in UNARY_EW or op in BROADCAST_EW:
            # Elementwise results take their shape from the operands (a caller's shape can be stale
            # when a rank-0 value meets a [1] constant).
            shapes = [x.shape if isinstance(x, Val) else self.const_shapes[x] for x in ins if x != ""]
            out = shapes[0]
            for sh in shapes[1:] if op in BROADCAST_EW else []:
                out = broadcast(out, sh)
            outs_meta = [(out,) + tuple(outs_meta[0][1:])]
        outs = [Val(self.fresh(op.lower()), *m) for m in outs_meta]
        self.nodes.append(helper.make_node(op, names, [o.name for o in outs], name=self.fresh(op), **attrs))
        for o in outs:
            if numel(o.shape) > MAX_ELEMS:
                raise AssertionError(f"generator made {op} output of {numel(o.shape)} elements")
            self.values[o.name] = o
            self.pool.append(o)
        return outs

    def op1(self, op, ins, shape, mag, lb=-math.inf, dtype=F32, **attrs):
        return self.node(op, ins, [(shape, dtype, mag, lb)], **attrs)[0]

    # ---- picking operands ----
    def pick(self, pred=lambda v: True, dtype=F32):
        cands = [v for v in self.pool if v.dtype == dtype and pred(v)]
        if not cands:
            raise Skip()
        n = len(cands)
        # Recent values and values no node reads yet are likelier: chains grow deep and few
        # results are left dangling; older values still get picked, so values fan out.
        w = [(1.0 + 3.0 * i / n) * (3.0 if v.uses == 0 else 1.0) for i, v in enumerate(cands)]
        return self.choice(cands, p=w)

    # ---- assembling ----
    def model(self):
        outs = [v for v in self.pool if v.uses == 0 and v not in self.inputs]
        if not outs:
            raise Skip()
        # A few leaves at most become outputs (the rest is dead code kiln must drop); sometimes a
        # value that also feeds other nodes is an output too.
        outs = outs[-6:]
        inner = [v for v in self.pool if v.uses > 0 and v not in self.inputs and v not in outs]
        if inner and self.chance(0.25):
            outs.append(self.choice(inner))
        g = helper.make_graph(
            self.nodes, f"fuzz_{self.seed}",
            [helper.make_tensor_value_info(v.name, ONNX_TYPE[v.dtype], list(v.shape)) for v in self.inputs],
            [helper.make_tensor_value_info(v.name, ONNX_TYPE[v.dtype], list(v.shape)) for v in outs],
            initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kiln-fuzz")
        m.ir_version = 8
        return m


def generate(seed):
    """Returns (ModelProto, {input name: ndarray}) for the seed."""
    import gen_ops  # noqa: E402 (the op families; imported here so this file stays importable alone)
    b = Builder(seed)
    gen_ops.make_inputs(b)
    steps = b.randint(3, 14)
    tries = 0
    while steps > 0 and len(b.nodes) < MAX_NODES and tries < 200:
        tries += 1
        fam = gen_ops.pick_family(b)
        mark = (len(b.nodes), len(b.inits), len(b.pool), b._n, [v.uses for v in b.pool])
        try:
            fam(b)
            steps -= 1
        except Skip:
            # Undo a family that gave up half way, so a skipped attempt leaves no trace.
            n_nodes, n_inits, n_pool, _, uses = mark
            del b.nodes[n_nodes:], b.inits[n_inits:], b.pool[n_pool:]
            for v, u in zip(b.pool, uses):
                v.uses = u
    return b.model(), b.input_data, b


def check_shapes(model, builder):
    """Every shape the generator believes must be what ONNX shape inference derives."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    known = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            known[vi.name] = (tuple(d.dim_value for d in t.shape.dim), t.elem_type)
    for name, v in builder.values.items():
        if name in known and (known[name][0] != v.shape or known[name][1] != ONNX_TYPE[v.dtype]):
            raise AssertionError(f"seed {builder.seed}: {name} believed {v.shape}/{v.dtype}, "
                                 f"inferred {known[name]}")


def write(seed, outdir):
    model, data, _ = generate(seed)
    onnx.checker.check_model(model, full_check=True)
    os.makedirs(outdir, exist_ok=True)
    onnx.save(model, os.path.join(outdir, "model.onnx"))
    for name, arr in data.items():
        np.save(os.path.join(outdir, name + ".npy"), arr)
    return model


def self_test(count, start=0):
    import collections
    ops = collections.Counter()
    bad = 0
    for seed in range(start, start + count):
        try:
            model, data, b = generate(seed)
            onnx.checker.check_model(model, full_check=True)
            check_shapes(model, b)
            again, data2, _ = generate(seed)
            if again.SerializeToString() != model.SerializeToString() or any(
                    not np.array_equal(data[k], data2[k]) for k in data):
                raise AssertionError("not deterministic")
        except Exception as e:  # report every bad seed, then fail
            bad += 1
            print(f"seed {seed}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            continue
        ops.update(n.op_type for n in model.graph.node)
    print(f"{count - bad}/{count} graphs valid and deterministic; op counts:")
    print(", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
    return bad == 0


def main(argv):
    if len(argv) in (3, 4) and argv[1] == "--self-test":
        sys.exit(0 if self_test(int(argv[2]), int(argv[3]) if len(argv) == 4 else 0) else 1)
    elif len(argv) == 3:
        write(int(argv[1]), argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    # The op modules import this file as `gen_graph`; run that module, not a second copy of it
    # under the name __main__ (its Skip would be a different class).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_graph
    gen_graph.main(sys.argv)
