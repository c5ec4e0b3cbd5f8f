"""The Ray measurer's driver (src/tune/ray_measurer.h, docs/tuning.md): runs kiln tune's
measurement jobs on a Ray cluster of identical machines.

kiln starts this once per `kiln tune --measurer ray` run, with the default python3 (the one pip
installs ray for), and talks to it over stdin/stdout, one line each way per round:

  kiln -> driver   JOB <folder> <n>          requests <folder>/req_<i>.bin, i < n
  driver -> kiln   KILN-RAY ready <slots>    once, after connecting (slots: kiln_measure units)
                   KILN-RAY done             every <folder>/res_<i>.bin is written
                   KILN-RAY error <line>     then the driver exits

Only lines starting with "KILN-RAY " are protocol (Ray may print its own). Each request becomes
one remote task carrying the request's bytes (nodes need not share a file system): the task writes
them to a private temporary folder on its node, runs `KILN tune-worker` there (kiln is installed
at the same path on every node: that is what "identical machines" means here) and returns the
result's bytes. Each task holds one unit of the custom resource `kiln_measure`, and every node is
started with `--resources='{"kiln_measure": 1}'`, so a node runs one measurement at a time and no
timing shares its cores with another. Compiles could run wider than that; they do not, to keep
one rule. Every wait has a timeout; a failure is one line, never a hang.
"""
import argparse
import os
import socket
import sys
import threading

PREFIX = "KILN-RAY "


def say(line):
    sys.stdout.write(PREFIX + line + "\n")
    sys.stdout.flush()


def fail(message):
    say("error " + " ".join(str(message).split()))
    sys.stdout.flush()
    os._exit(1)  # also from the watchdog thread, and without waiting on Ray's shutdown


def first_line(e):
    text = str(e).strip()
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else '(no message)'}"


def parse_address(address):
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        fail(f"--ray-address expects HOST:PORT (the head node's `ray start --port`), got '{address}'")
    return host, int(port)


def measure_on_node(kiln, request, timeout_s):
    """Runs on a cluster node: one `kiln tune-worker` job. Returns ("ok", result bytes) or
    ("error", one line naming the node)."""
    import shutil
    import subprocess
    import tempfile

    node = socket.gethostname()
    folder = tempfile.mkdtemp(prefix="kiln-ray-job-")
    try:
        req, res = os.path.join(folder, "request.bin"), os.path.join(folder, "result.bin")
        with open(req, "wb") as f:
            f.write(request)
        env = dict(os.environ)
        # Ray sets OMP_NUM_THREADS=1 in its workers; the request says how many threads to time.
        env.pop("OMP_NUM_THREADS", None)
        try:
            p = subprocess.run([kiln, "tune-worker", req, res], capture_output=True, text=True, timeout=timeout_s,
                               env=env)
        except FileNotFoundError:
            return "error", f"node {node}: {kiln} not found (kiln must be installed at the same path on every node)"
        except subprocess.TimeoutExpired:
            return "error", f"node {node}: kiln tune-worker ran past {timeout_s:.0f} s"
        if p.returncode != 0:
            lines = [l for l in p.stderr.splitlines() if l.strip()]
            return "error", f"node {node}: kiln tune-worker exited {p.returncode}: {lines[0] if lines else '(no output)'}"
        with open(res, "rb") as f:
            return "ok", f.read()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--connect-timeout", type=float, default=20)
    ap.add_argument("--job-timeout", type=float, default=600)
    args = ap.parse_args()
    host, port = parse_address(args.address)
    try:
        import ray
    except ImportError as e:
        fail(f"ray is not installed for {sys.executable} ({first_line(e)}); "
             "`python3 -m pip install ray==2.40.0` (scripts/setup.sh does)")
    # ray.init retries an unreachable head for minutes: a plain connect first says at once that
    # nothing listens there, and a watchdog bounds whatever ray.init does after that.
    try:
        socket.create_connection((host, port), timeout=min(5.0, args.connect_timeout)).close()
    except OSError as e:
        fail(f"cannot reach a Ray cluster at {args.address} ({e.strerror or first_line(e)})")
    watchdog = threading.Timer(args.connect_timeout,
                               lambda: fail(f"connecting to the Ray cluster at {args.address} took over "
                                            f"{args.connect_timeout:.0f} s"))
    watchdog.daemon = True
    watchdog.start()
    try:
        ray.init(address=args.address, log_to_driver=False, logging_level="warning")
        slots = int(ray.cluster_resources().get("kiln_measure", 0))
    except Exception as e:  # noqa: BLE001 - any failure of Ray's is reported as one line
        fail(f"cannot connect to the Ray cluster at {args.address}: {first_line(e)}")
    watchdog.cancel()
    if slots < 1:
        fail(f"no node of the Ray cluster at {args.address} offers the kiln_measure resource "
             "(start every node with --resources='{\"kiln_measure\": 1}')")
    remote = ray.remote(num_cpus=0, resources={"kiln_measure": 1}, max_retries=0)(measure_on_node)
    say(f"ready {slots}")

    for line in sys.stdin:  # kiln closes stdin when it is done (or dies): the loop ends
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or parts[0] != "JOB" or not parts[2].isdigit():
            fail(f"unexpected line from kiln: {line.strip()!r}")
        folder, n = parts[1], int(parts[2])
        try:
            refs = []
            for i in range(n):
                with open(os.path.join(folder, f"req_{i}.bin"), "rb") as f:
                    refs.append(remote.remote(args.kiln, f.read(), args.job_timeout))
            # The tasks have their own timeout; this one also covers waiting for a free node.
            outs = ray.get(refs, timeout=args.job_timeout * max(1, (n + slots - 1) // slots) + 60)
        except ray.exceptions.GetTimeoutError:
            fail(f"the Ray cluster at {args.address} did not finish {n} measurement jobs in time")
        except Exception as e:  # noqa: BLE001 - a worker that crashed, a node that left, ...
            fail(f"a measurement job failed on the Ray cluster: {first_line(e)}")
        for i, (status, payload) in enumerate(outs):
            if status != "ok":
                fail(payload)
            path = os.path.join(folder, f"res_{i}.bin")
            with open(path + ".tmp", "wb") as f:
                f.write(payload)
            os.replace(path + ".tmp", path)
        say("done")


if __name__ == "__main__":
    main()
