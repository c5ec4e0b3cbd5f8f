#!/usr/bin/env python3
"""`kiln tune --measurer ray` on a private one-node Ray cluster on loopback (docs/tuning.md).

- a head node with one `kiln_measure` unit is started in its own session, on free ports, with a
  private temporary folder, and is always torn down at the end (its process group, then any process
  still naming that folder, by pid: never `ray stop`, which stops every Ray on the machine);
- a 10 s tune through the cluster writes well-formed records, and the run says it measured there;
- those records and a local run's merge into one database (`kiln tune --merge`);
- a worker that crashes on its node is one error line from the driver, not a hang;
- a wrong address is one error line and a non-zero exit within a few seconds, writing no records;
- `kiln tune-worker` on a truncated request is one line and exit 1, leaving no result file;
- nothing is left behind: no Ray process, no kiln-ray temporary folder of this run.

Ray is a test dependency (scripts/setup.sh installs it): when it is missing this test FAILS.
It must run with the python3 kiln itself starts for the driver (the first on PATH).

Usage: test_ray_measurer.py KILN MODELS_DIR
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from cli_check import KILN, MODELS, check, failures, finish
from cli_check import kiln as run_kiln

MODEL = os.path.join(MODELS, "demo.onnx")


def kiln(*args, timeout=120):
    return run_kiln(*args, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


try:
    import ray  # noqa: F401 - only whether it imports
except ImportError as e:
    failures.append(f"ray is not installed for {sys.executable} ({e}); scripts/setup.sh installs it")
    finish("test_ray_measurer")
path_python = shutil.which("python3")
if not path_python or os.path.realpath(path_python) != os.path.realpath(sys.executable):
    # kiln runs the driver with the python3 on PATH; if that is another interpreter, it may lack ray.
    r = subprocess.run([path_python or "python3", "-c", "import ray"], capture_output=True)
    check(r.returncode == 0, f"the python3 on PATH ({path_python}) cannot import ray; kiln's driver would fail")

tmp = tempfile.mkdtemp(prefix="kiln_ray_test_")
# Ray's socket paths live under its temp folder and must stay short (AF_UNIX: 107 bytes).
ray_tmp = tempfile.mkdtemp(prefix="kr", dir="/tmp")
KILN_RAY_DIRS = os.path.join(tempfile.gettempdir(), "kiln-ray-*")
before = set(glob.glob(KILN_RAY_DIRS))
port = free_port()
head = None
try:
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
           "--node-ip-address=127.0.0.1", '--resources={"kiln_measure": 1}', "--num-cpus=1",
           "--include-dashboard=false", f"--dashboard-port={free_port()}", f"--temp-dir={ray_tmp}",
           "--disable-usage-stats", f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
           f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
           f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}"]
    log_path = os.path.join(tmp, "ray_start.log")
    t0 = time.time()
    with open(log_path, "w") as log:
        # Its own session: the head and everything it starts form one process group to stop.
        head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    started = False
    while time.time() - t0 < 60 and head.poll() is None:
        if "Ray runtime started" in open(log_path).read():
            started = True
            break
        time.sleep(0.2)
    check(started, f"ray start did not come up in 60 s: {open(log_path).read()[-800:]}")
    if started:
        print(f"ray head on 127.0.0.1:{port} in {time.time() - t0:.1f} s")
        rec = os.path.join(tmp, "ray.jsonl")
        t1 = time.time()
        # The schedule search (what the measurer serves; the fusion decisions are measured on this
        # machine and have their own test).
        r = kiln("tune", MODEL, "--budget", "10s", "--threads", "1", "--measurer", "ray", "--ray-address",
                 f"127.0.0.1:{port}", "--records", rec, "--no-fusion-search")
        print(f"kiln tune via ray: {time.time() - t1:.1f} s")
        check(r.returncode == 0, f"tune via ray exited {r.returncode}: {r.stderr.strip()[-600:]}")
        check(f"measuring on the Ray cluster at 127.0.0.1:{port}: 1 kernels at a time" in r.stdout,
              f"no Ray measurer line: {r.stdout[:400]}")
        m = re.search(r"search: ([0-9.]+) s of the 10 s budget; (\d+) kernels searched", r.stdout)
        check(m is not None and int(m.group(2)) >= 1, f"no kernel searched via ray: {r.stdout[-600:]}")
        if m:
            check(float(m.group(1)) <= 10 + 5, f"search took {m.group(1)} s of a 10 s budget")
        lines = open(rec).read().splitlines() if os.path.exists(rec) else []
        check(len(lines) >= 1, "the ray run wrote no records")
        ray_records = [json.loads(l) for l in lines]
        for x in ray_records:
            check(x.get("schema") == 1 and x.get("threads") == 1 and x.get("signature") and x.get("trials", 0) > 0
                  and x.get("default_ms", 0) > 0 and "s:contraction.mr" in x, f"ray record: {x}")

        # A local run's records and the ray run's merge into one database, one per kernel.
        loc = os.path.join(tmp, "local.jsonl")
        r = kiln("tune", MODEL, "--budget", "5s", "--threads", "1", "--records", loc, "--no-fusion-search")
        check(r.returncode == 0, f"local tune exited {r.returncode}: {r.stderr.strip()[-400:]}")
        local_records = [json.loads(l) for l in open(loc).read().splitlines()] if os.path.exists(loc) else []
        check(len(local_records) >= 1, "the local run wrote no records")
        merged = os.path.join(tmp, "merged.jsonl")
        r = kiln("tune", "--merge", rec, loc, "-o", merged)
        check(r.returncode == 0, f"merge exited {r.returncode}: {r.stderr}")
        if r.returncode == 0:
            got = [json.loads(l) for l in open(merged).read().splitlines()]
            want = {x["signature"] for x in ray_records} | {x["signature"] for x in local_records}
            check(sorted(x["signature"] for x in got) == sorted(want),
                  f"merged {[x['signature'] for x in got]}, want one each of {sorted(want)}")

        # A worker that crashes on its node: the driver (what kiln runs) says so in one line and
        # exits, it does not hang. The "kiln" here is a script that kills itself.
        crash = os.path.join(tmp, "crashing_kiln")
        with open(crash, "w") as f:
            f.write("#!/bin/sh\nkill -9 $$\n")
        os.chmod(crash, 0o755)
        jobs = os.path.join(tmp, "jobs")
        os.mkdir(jobs)
        with open(os.path.join(jobs, "req_0.bin"), "wb") as f:
            f.write(b"anything")
        driver = os.path.join(os.path.dirname(KILN), "ray_measure.py")
        t1 = time.time()
        d = subprocess.run([path_python or "python3", driver, "--address", f"127.0.0.1:{port}", "--kiln", crash],
                           input=f"JOB {jobs} 1\n", capture_output=True, text=True, timeout=60)
        proto = [l for l in d.stdout.splitlines() if l.startswith("KILN-RAY ")]
        check(d.returncode == 1 and len(proto) == 2 and proto[0].startswith("KILN-RAY ready 1")
              and "kiln tune-worker exited -9" in proto[1], f"crashing worker: rc {d.returncode}, {proto}, {d.stderr[-300:]}")
        check(time.time() - t1 < 30, f"the crashing worker took {time.time() - t1:.1f} s to report")
        check(not os.path.exists(os.path.join(jobs, "res_0.bin")), "a crashed job left a result")

    # A wrong address: nothing listens there. One line, exit 1, quickly, no records file.
    bad_rec = os.path.join(tmp, "bad.jsonl")
    t1 = time.time()
    r = kiln("tune", MODEL, "--budget", "5s", "--measurer", "ray", "--ray-address", f"127.0.0.1:{free_port()}",
             "--records", bad_rec, timeout=60)
    took = time.time() - t1
    err = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(err) == 1 and "Ray" in err[0], f"wrong address: rc {r.returncode}, {r.stderr!r}")
    check(took < 5, f"wrong address took {took:.1f} s to fail")
    check(not os.path.exists(bad_rec), "a wrong address wrote a records file")
    r = kiln("tune", MODEL, "--measurer", "ray", "--records", bad_rec)
    check(r.returncode == 1 and "--ray-address" in r.stderr, f"--measurer ray without an address: {r.stderr!r}")

    # The worker on a truncated request: one line, exit 1, no result file.
    req, res = os.path.join(tmp, "req.bin"), os.path.join(tmp, "res.bin")
    with open(req, "wb") as f:
        f.write(b"KILNMRQ\x01\x05\x00")
    r = kiln("tune-worker", req, res)
    err = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(err) == 1 and "not a valid kiln measurement request" in err[0],
          f"tune-worker on a truncated request: rc {r.returncode}, {r.stderr!r}")
    check(not os.path.exists(res) and not glob.glob(res + "*"), "tune-worker left a result file")
finally:
    if head is not None:
        # Stop our cluster, and only ours: its process group, then anything still naming its folder.
        try:
            os.killpg(head.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            head.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=10)
        deadline = time.time() + 10
        left = []
        while time.time() < deadline:
            left = []
            for p in glob.glob("/proc/[0-9]*/cmdline"):
                try:
                    if ray_tmp.encode() in open(p, "rb").read():
                        left.append(int(p.split("/")[2]))
                except OSError:
                    pass
            if not left:
                break
            time.sleep(0.3)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        check(not left, f"Ray processes outlived the head's process group: {left}")
    shutil.rmtree(ray_tmp, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)

leftover = set(glob.glob(KILN_RAY_DIRS)) - before
check(not leftover, f"kiln left its Ray measurer folders behind: {sorted(leftover)}")
finish("test_ray_measurer")
