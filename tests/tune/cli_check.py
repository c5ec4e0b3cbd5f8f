"""What the kiln tune / calibrate CLI tests share (imported from the scripts' own folder): the kiln
binary and the models folder from the command line, failures collected rather than stopping at
the first, kiln run without a shell, and one report line with the exit status.

Usage of every script: SCRIPT KILN MODELS_DIR"""
import subprocess
import sys

KILN, MODELS = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def kiln(*args, env=None, timeout=300):
    return subprocess.run([KILN, *args], capture_output=True, text=True, env=env, timeout=timeout)


def finish(name):
    for f in failures:
        print("FAIL:", f)
    print(f"{name}: {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)
