"""Reading kiln's command-line reports (shared by the bench/ scripts).

kernel_times: `kiln bench MODEL --kernels`'s table, [(kernel number, name, median ms)].
kernel_nodes: `kiln explain MODEL`'s node lists, {kernel name: [ONNX node names]}.
"""
import re
import subprocess
import sys


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r.stdout


def kernel_times(kiln, model, threads, runs, extra=()):
    out = []
    for line in run([kiln, "bench", model, "--kernels", "--threads", str(threads), "--runs", str(runs)] + list(extra)).splitlines():
        p = line.split()
        # "#  kernel  kind  gen|lib|in-place|view  ms  MB  GB/s  level  % bw"
        if len(p) > 5 and p[0].isdigit() and p[3] in ("gen", "lib", "in-place", "view"):
            out.append((int(p[0]), p[1], float(p[4])))
    return out


def kernel_nodes(kiln, model, extra=()):
    kernels, cur = {}, None
    for line in run([kiln, "explain", model] + list(extra)).splitlines():
        m = re.match(r"kernel \d+: (\S+)", line)
        if m:
            cur = m.group(1)
            kernels[cur] = []
        elif cur and line.strip().startswith("nodes:"):
            kernels[cur] = [n.strip() for n in line.split(":", 1)[1].split(",")]
    return kernels
