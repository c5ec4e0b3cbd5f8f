#!/usr/bin/python3
"""The bad-input table (tests/cli/bad_inputs.txt) through the kiln command line.

Usage: run_bad_inputs.py KILN [TABLE] [--only SUBSTRING]

Each row is `NAME | EXIT | MESSAGE | COMMAND`. The command runs under /bin/sh in a fresh working
folder, with {kiln} the binary, {d} the folder make_bad_inputs.py filled, {out} an output folder
that does not exist yet and {cache} a JIT cache private to the row (XDG_CACHE_HOME points there).
A row passes when:
  - the exit status equals EXIT (0: success, 1: a user error); a signal, a timeout and exit 70
    ("internal error") never pass, whatever the row says;
  - MESSAGE (a substring) is in stderr+stdout; for EXIT 1 stderr is exactly one line starting
    with "kiln: error: ";
  - for EXIT 1 the output folder holds no file;
  - the whole command's peak RSS (kiln and anything it started, from wait4) is at most 100 MB
    when every model the row names is under 1 KiB.
A row whose NAME starts with "XFAIL " records a known defect: it must fail (so that the fix, when
it comes, shows up as "XPASS" and fails the run until the marker is removed).
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
KILN = os.path.abspath(sys.argv[1])
args = sys.argv[2:]
only = None
if "--only" in args:
    i = args.index("--only")
    only = args[i + 1]
    del args[i:i + 2]
TABLE = args[0] if args else os.path.join(HERE, "bad_inputs.txt")
RSS_LIMIT_KB = 100 * 1024
TIMEOUT_S = 120


def rows(path):
    for lineno, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ", 3)]
        if len(parts) != 4 or not parts[1].isdigit():
            sys.exit(f"{path}:{lineno}: expected NAME | EXIT | MESSAGE | COMMAND")
        yield lineno, parts[0], int(parts[1]), parts[2], parts[3]


def run_row(cmd, cwd, env):
    """Runs cmd under sh; returns (status, stdout, stderr, peak RSS in KiB, timed_out). wait4's
    rusage of the shell covers its waited-for descendants too (kiln, and the C compiler)."""
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
        p = subprocess.Popen(["/bin/sh", "-c", cmd], cwd=cwd, env=env, stdout=so, stderr=se,
                             start_new_session=True)
        timed_out = []

        def kill():
            timed_out.append(True)
            os.killpg(p.pid, signal.SIGKILL)

        timer = threading.Timer(TIMEOUT_S, kill)
        timer.start()
        _, wstatus, usage = os.wait4(p.pid, 0)
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(wstatus)
        so.seek(0)
        se.seek(0)
        return (p.returncode, so.read().decode(errors="replace"), se.read().decode(errors="replace"),
                usage.ru_maxrss, bool(timed_out))


def models_named(cmd, d):
    return [os.path.join(d, m) for m in re.findall(r"\{d\}/([\w.-]+\.onnx)", cmd)]


def main():
    failures = []
    count = 0
    with tempfile.TemporaryDirectory(prefix="kiln-bad-inputs-") as top:
        d = os.path.join(top, "inputs")
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_bad_inputs.py"), d], check=True)
        for lineno, name, want_exit, message, template in rows(TABLE):
            if only and only not in name:
                continue
            count += 1
            work = os.path.join(top, f"row{lineno}")
            os.makedirs(work)
            out, cache = os.path.join(work, "out"), os.path.join(work, "cache")
            os.makedirs(cache, mode=0o700)
            subst = {"kiln": shlex.quote(KILN), "d": shlex.quote(d), "out": shlex.quote(out),
                     "cache": shlex.quote(cache), "src": shlex.quote(os.path.dirname(HERE))}
            cmd = re.sub(r"\{(\w+)\}", lambda m: subst[m.group(1)], template)
            env = dict(os.environ, XDG_CACHE_HOME=cache)
            status, so, se, rss, timed_out = run_row(cmd, work, env)
            problems = []
            if timed_out:
                problems.append(f"timed out after {TIMEOUT_S} s")
            elif status < 0 or status > 128:
                problems.append(f"killed by a signal (status {status})")
            elif status == 70:
                problems.append("exit 70 (internal error)")
            elif status != want_exit:
                problems.append(f"exit {status}, expected {want_exit}")
            if "internal error" in se:
                problems.append("stderr says 'internal error'")
            if message not in se + so:
                problems.append(f"'{message}' missing")
            if want_exit == 1:
                lines = se.strip().splitlines()
                if len(lines) != 1 or not lines[0].startswith("kiln: error: "):
                    problems.append(f"stderr is not one 'kiln: error:' line ({len(lines)} lines)")
                if os.path.isdir(out) and os.listdir(out):
                    problems.append(f"files left in the output folder: {sorted(os.listdir(out))[:3]}")
            models = models_named(template, d)
            # Under a sanitizer (KILN_SANITIZED) ASan's shadow memory makes RSS meaningless.
            if not os.environ.get("KILN_SANITIZED") and models and all(not os.path.exists(m) or os.path.getsize(m) < 1024 for m in models) and not timed_out:
                if rss > RSS_LIMIT_KB:
                    problems.append(f"peak RSS {rss // 1024} MB > {RSS_LIMIT_KB // 1024} MB for a model under 1 KiB")
            shown = (se.strip().splitlines() or so.strip().splitlines() or [""])[-1][:200]
            if name.startswith("XFAIL "):
                print(f"{'xfail' if problems else 'XPASS':5} {name}: {'; '.join(problems)[:200]}")
                if not problems:
                    failures.append((name, ["passed: the defect is fixed; remove XFAIL from the row"], se.strip()))
                continue
            print(f"{'ok' if not problems else 'FAIL':4} {name}: {shown}")
            if problems:
                failures.append((name, problems, se.strip()[-2000:]))
    if count == 0:
        sys.exit("no rows ran")
    for name, problems, se in failures:
        print(f"FAILED {name}: {'; '.join(problems)}\n    stderr: {se}")
    if failures:
        sys.exit(1)
    print(f"all {count} rows passed")


main()
