"""The real packaging path, as a user takes it: a fresh virtual environment, `pip wheel` of this
repository (scikit-build-core running its CMake project), `pip install` of that wheel, then the
whole tests/python suite against the installed package (not the in-tree build).

Offline: --no-build-isolation --no-index, with the build dependencies (scikit-build-core, nanobind)
and test dependencies (numpy, onnx, onnxruntime, pytest) that scripts/setup.sh installed into the
base Python, seen through --system-site-packages. The CMake build directory is kept between runs
(--cmake-build-dir), so a second run rebuilds only what changed; when ccache is installed it is
the compiler launcher, and a build directory beside the main one (same depth, the same relative
paths) hits the objects the main build left in the cache.

Usage: run_wheel_test.py --source DIR --work DIR --cmake-build-dir DIR [--cxx C++] [--cc CC] [pytest args...]
  --cxx/--cc: the main build's compilers (ccache keys on the compiler's path; c++ and g++ differ).
Environment: KILN_MODELS, KILN_BIN as for the suite (tests/python/conftest.py)."""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time


def step(title, cmd, **kw):
    t = time.monotonic()
    print(f"run_wheel_test: {title}: {' '.join(cmd)}", flush=True)
    rc = subprocess.run(cmd, **kw).returncode
    print(f"run_wheel_test: {title}: {time.monotonic() - t:.1f} s", flush=True)
    if rc != 0:
        sys.exit(f"run_wheel_test: {title} failed (exit {rc})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--cmake-build-dir", required=True)
    ap.add_argument("--cxx")
    ap.add_argument("--cc")
    args, pytest_args = ap.parse_known_args()

    shutil.rmtree(args.work, ignore_errors=True)  # a fresh environment every run
    os.makedirs(args.work)
    venv = os.path.join(args.work, "venv")
    step("venv", [sys.executable, "-m", "venv", "--system-site-packages", venv])
    py = os.path.join(venv, "bin", "python")

    config = [f"-Cbuild-dir={args.cmake_build_dir}"]
    if args.cxx:
        config.append(f"-Ccmake.define.CMAKE_CXX_COMPILER={args.cxx}")
    if args.cc:
        config.append(f"-Ccmake.define.CMAKE_C_COMPILER={args.cc}")
    if shutil.which("ccache"):
        config.append("-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache")
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2"),
               CMAKE_GENERATOR=os.environ.get("CMAKE_GENERATOR", "Unix Makefiles"))
    env.pop("PYTHONPATH", None)
    dist = os.path.join(args.work, "dist")
    step("pip wheel", [py, "-m", "pip", "wheel", "--no-build-isolation", "--no-index", "--no-deps",
                       "--no-cache-dir", "--disable-pip-version-check", "-w", dist, *config, args.source], env=env)
    wheels = glob.glob(os.path.join(dist, "kiln-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"run_wheel_test: expected one kiln wheel in {dist}, found {wheels}")
    step("pip install", [py, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir",
                         "--disable-pip-version-check", wheels[0]], env=env)

    # The suite from a folder outside the source tree, importing the installed package.
    env["KILN_EXPECT_INSTALLED"] = venv
    tests = os.path.join(args.source, "tests", "python")
    step("pytest (installed wheel)", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", tests, tests,
                                      *pytest_args], env=env, cwd=args.work)


if __name__ == "__main__":
    main()
