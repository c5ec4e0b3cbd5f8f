#!/usr/bin/python3
"""Delta-debugging minimiser for a failing fuzz case: shrinks the graph while the failure's key
(fuzz_check.Failure.key: class, path, message signature) stays the same.

    minimize.py CASE_DIR [--key KEY] [--kiln build/kiln] [--save NAME] [--max-trials 400]

CASE_DIR holds model.onnx and <input>.npy (run_fuzz.py --keep leaves one per failing seed; a
seed's folder is CASE_DIR/seed_S). Without --key the case's first failure is the target.
--save NAME writes tests/fuzz/regressions/NAME.onnx and NAME.npz (the inputs); the manifest line
is yours to write (pending.txt until kiln is fixed, then active.txt).

Reductions tried, greedily, each kept when the key persists (a tried-and-refused step is not
tried again):
  1. drop a graph output;
  2. move an output up: replace it by one of its producer's inputs;
  3. cut: make a node's computed input a graph input, fed with the value it had (from ONNX
     Runtime, else kiln's reference), so everything upstream that only fed it goes;
  4. bypass a node whose output has the shape and type of one of its inputs.
After each step, nodes, initializers and inputs nothing needs any more are removed.
"""
import argparse
import copy
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fuzz_check  # noqa: E402


def type_map(model):
    """name -> ValueInfoProto with full type and shape, from ONNX shape inference."""
    inf = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    vis = {}
    for vi in list(inf.graph.value_info) + list(inf.graph.input) + list(inf.graph.output):
        vis[vi.name] = vi
    return vis


def prune(model, inputs):
    """Removes what no graph output needs: nodes, initializers, graph inputs."""
    g = model.graph
    need = {o.name for o in g.output}
    keep = []
    for n in reversed(list(g.node)):
        if any(o in need for o in n.output):
            keep.append(n)
            need.update(i for i in n.input if i)
    keep.reverse()
    del g.node[:]
    g.node.extend(keep)
    inits = [t for t in g.initializer if t.name in need]
    del g.initializer[:]
    g.initializer.extend(inits)
    ins = [i for i in g.input if i.name in need]
    del g.input[:]
    g.input.extend(ins)
    return model, {k: v for k, v in inputs.items() if k in {i.name for i in ins}}


def consumers(model, name):
    return [n for n in model.graph.node if name in n.input]


def rename_uses(model, old, new):
    for n in model.graph.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
    for o in model.graph.output:
        if o.name == old:
            o.name = new


class Minimizer:
    def __init__(self, args, model, inputs, key):
        self.args, self.model, self.inputs, self.key = args, model, inputs, key
        self.tmp = tempfile.mkdtemp(prefix="kiln-minimize-")
        self.cache = tempfile.mkdtemp(prefix="kiln-minimize-jit-")
        use_ort = fuzz_check.ort_available(args.ort_python)
        self.ort = fuzz_check.OrtWorker(args.ort_python) if use_ort else None
        path = key.split(":")[1]
        self.modes = ["reference"] if path in ("reference", "ort") else ["reference", path]
        self.check_ort = key.startswith("ort-")
        self.trials, self.refused = 0, set()

    def write(self, model, inputs, d):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        onnx.save(model, os.path.join(d, "model.onnx"))
        for k, v in inputs.items():
            np.save(os.path.join(d, k + ".npy"), v)

    def fails(self, model, inputs):
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception:
            return False
        self.trials += 1
        case = os.path.join(self.tmp, "case")
        self.write(model, inputs, case)
        failures, _ = fuzz_check.check_case(self.args.kiln, case, self.ort if self.check_ort else None,
                                            self.cache, modes=self.modes)
        return any(f.matches(self.key) for f in failures)

    def values(self):
        """Every node output's value on the current inputs (ONNX Runtime, else kiln --reference)."""
        m = copy.deepcopy(self.model)
        vis = type_map(m)
        outs = {o.name for o in m.graph.output}
        for n in m.graph.node:
            for o in n.output:
                if o and o not in outs and o in vis and n.op_type != "Constant":
                    m.graph.output.append(vis[o])
        d = os.path.join(self.tmp, "values")
        self.write(m, self.inputs, d)
        ins = {k: os.path.join(d, k + ".npy") for k in self.inputs}
        names = [o.name for o in m.graph.output]
        if self.ort is not None:
            r = self.ort.run(os.path.join(d, "model.onnx"), ins, os.path.join(d, "out"))
            if r["ok"]:
                return {n: np.load(os.path.join(d, "out", f"{i}.npy")) for i, n in enumerate(names)}
        cmd = fuzz_check.kiln_command(self.args.kiln, d, ins, os.path.join(d, "ref"), "reference")
        rc, _, _ = fuzz_check.run_kiln(cmd, dict(os.environ))
        if rc != 0:
            return {}
        return {n: np.load(os.path.join(d, "ref", n + ".npy")) for n in names
                if os.path.exists(os.path.join(d, "ref", n + ".npy"))}

    def candidates(self):
        m = self.model
        produced = {o: n for n in m.graph.node for o in n.output}
        inits = {t.name for t in m.graph.initializer} | {n.output[0] for n in m.graph.node if n.op_type == "Constant"}
        outs = [o.name for o in m.graph.output]
        if len(outs) > 1:
            for o in outs:
                yield f"drop output {o}", lambda o=o: self.drop_output(o)
        for o in outs:
            n = produced.get(o)
            for i in (n.input if n else []):
                if i and i not in inits and i not in outs:
                    yield f"move output {o} to {i}", lambda o=o, i=i: self.move_output(o, i)
        for n in m.graph.node:
            for i in n.input:
                if i in produced and i not in inits:
                    yield f"cut {i}", lambda i=i: self.cut(i)
        for n in m.graph.node:
            if n.op_type != "Constant" and len(n.output) == 1:
                for i in n.input:
                    if i and i not in inits:
                        yield f"bypass {n.name} with {i}", lambda n=n, i=i: self.bypass(n.name, i)

    def drop_output(self, o):
        m = copy.deepcopy(self.model)
        keep = [x for x in m.graph.output if x.name != o]
        del m.graph.output[:]
        m.graph.output.extend(keep)
        return prune(m, dict(self.inputs))

    def move_output(self, o, i):
        m = copy.deepcopy(self.model)
        vi = type_map(m).get(i)
        if vi is None:
            return None
        outs = [x for x in m.graph.output if x.name != o]
        del m.graph.output[:]
        m.graph.output.extend(outs + [vi])
        return prune(m, dict(self.inputs))

    def cut(self, name):
        if self._values is None:
            self._values = self.values()
        if name not in self._values:
            return None
        m = copy.deepcopy(self.model)
        vi = copy.deepcopy(type_map(m).get(name))
        if vi is None:
            return None
        new = name + "_cut"
        rename_uses(m, name, new)
        vi.name = new
        m.graph.input.append(vi)
        inputs = dict(self.inputs)
        inputs[new] = self._values[name]
        return prune(m, inputs)

    def bypass(self, node_name, i):
        m = copy.deepcopy(self.model)
        vis = type_map(m)
        n = next(x for x in m.graph.node if x.name == node_name)
        o = n.output[0]
        if o not in vis or i not in vis or vis[o].type != vis[i].type:
            return None
        if any(x.name == o for x in m.graph.output) and any(x.name == i for x in m.graph.input):
            return None
        m.graph.node.remove(n)
        rename_uses(m, o, i)
        names = [x.name for x in m.graph.output]
        if len(set(names)) != len(names):
            return None
        return prune(m, dict(self.inputs))

    def run(self):
        self._values = None
        if not self.fails(self.model, self.inputs):
            sys.exit(f"minimize: the case does not fail with {self.key}")
        progress = True
        while progress and self.trials < self.args.max_trials:
            progress = False
            for desc, make in self.candidates():
                if desc in self.refused:
                    continue
                if self.trials >= self.args.max_trials:
                    break
                try:
                    got = make()
                except Exception:  # a reduction that makes an invalid graph is just not taken
                    got = None
                if got is not None and self.fails(*got):
                    self.model, self.inputs = got
                    self._values = None
                    print(f"  {desc}: {len([n for n in self.model.graph.node if n.op_type != 'Constant'])} nodes",
                          flush=True)
                    progress = True
                    break
                self.refused.add(desc)
        return self.model, self.inputs

    def close(self):
        if self.ort:
            self.ort.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.cache, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case")
    ap.add_argument("--key", help="the failure to keep (default: the case's first failure)")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--ort-python", default="python3")
    ap.add_argument("--save", metavar="NAME", help="write tests/fuzz/regressions/NAME.onnx and NAME.npz")
    ap.add_argument("--out", metavar="DIR", help="write the minimal case folder here")
    ap.add_argument("--max-trials", type=int, default=400)
    args = ap.parse_args()
    args.kiln = os.path.abspath(args.kiln)
    model = onnx.load(os.path.join(args.case, "model.onnx"))
    inits = {t.name for t in model.graph.initializer}
    inputs = {i.name: np.load(os.path.join(args.case, i.name + ".npy")) for i in model.graph.input
              if i.name not in inits}
    key = args.key
    if not key:
        cache = tempfile.mkdtemp(prefix="kiln-minimize-jit-")
        ort = fuzz_check.OrtWorker(args.ort_python) if fuzz_check.ort_available(args.ort_python) else None
        failures, _ = fuzz_check.check_case(args.kiln, args.case, ort, cache, work=tempfile.mkdtemp())
        if ort:
            ort.close()
        shutil.rmtree(cache, ignore_errors=True)
        if not failures:
            sys.exit("minimize: the case passes")
        key = failures[0].key
    print(f"minimize: keeping {key}")
    mz = Minimizer(args, model, inputs, key)
    try:
        model, inputs = mz.run()
    finally:
        mz.close()
    n = len([x for x in model.graph.node if x.op_type != "Constant"])
    print(f"minimize: {n} nodes after {mz.trials} trials")
    for node in model.graph.node:
        print("  ", node.op_type, list(node.input), "->", list(node.output))
    if args.out:
        mz.write(model, inputs, args.out)
    if args.save:
        d = os.path.join(HERE, "regressions")
        os.makedirs(d, exist_ok=True)
        onnx.save(model, os.path.join(d, args.save + ".onnx"))
        np.savez(os.path.join(d, args.save + ".npz"), **inputs)
        print(f"minimize: wrote {d}/{args.save}.onnx and .npz")


if __name__ == "__main__":
    main()
