"""1,000 inferences through one session do not grow the process (RSS from /proc/self/statm)."""

import os

import numpy as np

import kiln
from conftest import model_input


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_thousand_inferences_no_memory_growth(models_dir):
    sess = kiln.InferenceSession(os.path.join(models_dir, "mlp_ln.onnx"))
    x = model_input(models_dir, "mlp_ln")
    strided = np.asfortranarray(x)  # the copying path too
    for _ in range(50):  # warm up: allocator pools, first-touch pages
        sess.run(None, {"input": x})
        sess.run(None, {"input": strided})
    before = rss_bytes()
    for i in range(1000):
        out = sess.run(None, {"input": x if i % 2 else strided})
        assert out[0].shape == (1, 64, 256)
    grown = rss_bytes() - before
    # One output is 64 KiB; a leak of one output (or one input copy) per run would be 64 MB.
    assert grown < 4 * 1024 * 1024, f"RSS grew by {grown / 1e6:.1f} MB over 1,000 runs"
