"""ONNX Runtime as a second oracle for run_fuzz.py, kept alive across seeds (importing onnxruntime
costs ~0.2 s; a model runs in milliseconds). Run under the Python that has onnxruntime (the default
`python3`). Protocol: one JSON request per stdin line,
    {"model": PATH, "inputs": {NAME: NPY}, "outdir": DIR}
one JSON reply per stdout line: {"ok": true, "outputs": [NAME...]} or {"ok": false, "error": TEXT}.
Outputs are written as DIR/<index>.npy in graph-output order.

Graph optimisations are off and one thread is used: the oracle should run each node as the
spec says, not ONNX Runtime's fused rewrites of them.
"""
import json
import os
import sys

import numpy as np
import onnxruntime as ort


def main():
    ort.set_default_logger_severity(3)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    for line in sys.stdin:
        req = json.loads(line)
        try:
            sess = ort.InferenceSession(req["model"], opts, providers=["CPUExecutionProvider"])
            feeds = {k: np.load(v) for k, v in req["inputs"].items()}
            names = [o.name for o in sess.get_outputs()]
            results = sess.run(names, feeds)
            os.makedirs(req["outdir"], exist_ok=True)
            for i, r in enumerate(results):
                np.save(os.path.join(req["outdir"], f"{i}.npy"), np.asarray(r))
            reply = {"ok": True, "outputs": names}
        except Exception as e:  # the reply carries ONNX Runtime's message; the fuzzer classifies it
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}".replace("\n", " ")[:2000]}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
