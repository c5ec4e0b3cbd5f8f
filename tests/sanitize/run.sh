#!/usr/bin/env bash
# The CI sanitizer stage: kiln and its unit tests built with clang and -fsanitize=address,undefined
# (KILN_SANITIZE=ON, tests/sanitize/configure.sh) into BUILD_DIR, then run under it: every unit
# test, the public models (compiled with every kernel checked against the reference, so both
# executors run), the bad-input table, the ONNX conformance tests (compiled) and the importer's
# fuzz regressions. Any ASan/UBSan/LSan report fails the stage.
# Usage: run.sh BUILD_DIR [JOBS]. Prints the stage's wall time, part by part, at the end.
set -euo pipefail
BUILD=$(mkdir -p "${1:?build dir}" && cd "$1" && pwd)  # absolute: the unit tests run from its tests/
JOBS=${2:-2}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
start=$(date +%s)

"$SRC/tests/sanitize/configure.sh" "$BUILD"
cmake --build "$BUILD" -j "$JOBS" --target kiln kiln_unit_tests kiln_import_fuzzer
built=$(date +%s)

# halt_on_error / abort_on_error: the first report fails the command, so nothing is missed in a log.
# The suppressions (tests/sanitize/*.supp) each say why they are there.
#
# alloc_dealloc_mismatch=0, the one check switched off, and why: libstdc++ 12's std::stable_sort
# (std::get_temporary_buffer / _Temporary_buffer, inlined into kiln's callers: loop/affine.cc,
# runtime/memory_plan.cc, ...) allocates its merge buffer with ::operator new(nothrow) and, as
# clang compiles the inlined release, frees it with free(): ASan reports "alloc-dealloc-mismatch
# (operator new vs free)" with both ends inside the library. A suppressions file cannot name this
# report kind in LLVM 14 (only interceptor_*/odr_violation entries), so the check is off for the
# stage; every other ASan check (overflows, use-after-free, double free, leaks) stays on.
export ASAN_OPTIONS="abort_on_error=1:halt_on_error=1:detect_leaks=1:alloc_dealloc_mismatch=0:suppressions=$SRC/tests/sanitize/asan.supp"
# use_tls=0: LeakSanitizer's exit-time tracer faults while it scans the threads' dynamic TLS
# ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal error", after every test
# had passed: CI at 9bec023, and 3 of 3 local runs of unit-test shard 1 at effa7ed). A known
# LLVM-14 bug (google/sanitizers issue 1353; fixed upstream by D147459) that the JIT-loaded kernels
# reach: their prelude's scratch pointer is a _Thread_local of a dlopen'd module, and the OpenMP
# workers that ran them stay alive. Without TLS scanning no leak goes unseen; memory referenced
# only from TLS is reported instead, and lsan.supp names each such allocation (with use_tls=0 the
# same shard ran to its leak check and reported only glibc's pthread_setspecific block).
export LSAN_OPTIONS="suppressions=$SRC/tests/sanitize/lsan.supp:print_suppressions=0:use_tls=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export KILN_SANITIZED=1   # the bad-input table skips its RSS bound (ASan's shadow memory)
export XDG_CACHE_HOME="$BUILD/jit-cache"
# One OpenMP thread where kiln does not set the count itself (an executable takes the machine's
# cores unless told, and some tests ask for 2): LeakSanitizer's exit-time scan stops every thread,
# and libgomp's idle workers (started by the compiled kernels, never joined) are among them. The
# kernels are kiln's generated C, not instrumented; kiln's own code around them is serial.
export OMP_NUM_THREADS=1

# Models first: the unit tests that read the exported models (public-model sweeps) find them.
echo "sanitize: public models (compiled, every kernel against the reference)"
# Without LeakSanitizer here: on encoder and mobilenet_v2 its exit-time tracer itself faults
# ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal error", with one OpenMP
# thread too) after the run has finished and matched; that is not a leak report, and ASan and
# UBSan stay on (seen before use_tls=0 above, which these runs have not been tried with). The
# unit tests and the bad-input table run with leak checking.
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
  KILN_RUN_MODE=check "$SRC/tests/models/run_models.sh" "$BUILD/models" "$BUILD/kiln" demo mlp_ln encoder resnet18 mobilenet_v2
models=$(date +%s)

# The unit tests in JOBS shards at once (GoogleTest sharding): the suite is CPU-bound and about
# ten times slower under the sanitizers. LowerGroup.PublicModels and LowerContraction.PublicModels
# stay opt-in (KILN_LOWER_MODELS) as in ctest. Left out here, for the stage's time budget only
# (they run in `make test`): the three sweeps that run the loop interpreter over hundreds of
# generated cases, 110 s of the suite's ~200 s in a release build and over 15 min under ASan on
# 2 cores; the code they reach is reached by the rest of the suite on smaller cases.
SKIP="DecomposeResize.RunTimeScales:DecomposeResize.RunTimeRoi:LowerGroup.OnnxConformanceSweep"
echo "sanitize: unit tests ($JOBS shards, all but $SKIP)"
run_shard() {  # run_shard INDEX LOG
  (cd "$BUILD/tests" && GTEST_TOTAL_SHARDS=$JOBS GTEST_SHARD_INDEX=$1 ./kiln_unit_tests --gtest_brief=1 --gtest_filter="-$SKIP" \
     > "$2" 2>&1)
}
# Should LeakSanitizer's tracer fault all the same (use_tls=0 above), no leak check ran at all:
# the shard runs once more, alone, and that run's leak check decides. Anything else (a failed
# test, a leak report, an ASan or UBSan report) fails at once.
tracer_fault() {  # tracer_fault LOG: the run passed and only the leak checker's tracer failed
  grep -q '^\[  PASSED  \]' "$1" && grep -q 'Tracer caught signal' "$1" &&
    ! grep -q 'ERROR: LeakSanitizer: detected memory leaks\|ERROR: AddressSanitizer\|runtime error:\|\[  FAILED  \]' "$1"
}
pids=()
for ((i = 0; i < JOBS; i++)); do
  run_shard "$i" "$BUILD/unit-shard-$i.log" &
  pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" && continue
  log="$BUILD/unit-shard-$i.log"
  if tracer_fault "$log"; then
    echo "sanitize: unit-test shard $i passed but LeakSanitizer's tracer faulted at exit; running the shard again for its leak check"
    log="$BUILD/unit-shard-$i.retry.log"
    run_shard "$i" "$log" && continue
  fi
  status=1
  echo "sanitize: unit-test shard $i failed:"
  tail -n 60 "$log"
done
[ $status -eq 0 ] || exit 1
units=$(date +%s)

echo "sanitize: bad-input table"
/usr/bin/python3 "$SRC/tests/cli/run_bad_inputs.py" "$BUILD/kiln" >/dev/null

# The ONNX conformance tests through the compiled executable (every test folder in one kiln
# process): kiln's importer, passes, lowering and emitter on about 1,000 small graphs. Without
# LeakSanitizer for the reason the models step gives.
echo "sanitize: ONNX conformance (compiled)"
if ! ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
  "$SRC/tests/onnx/run_conformance.sh" "$BUILD/kiln" --compiled \
  --expect-library "$SRC/tests/onnx/expected_library.txt" > "$BUILD/conformance.log" 2>&1; then
  echo "sanitize: ONNX conformance (compiled) failed:"
  grep -v '^FAIL ' "$BUILD/conformance.log" | tail -n 60
  exit 1
fi
conformance=$(date +%s)

echo "sanitize: importer fuzz regressions"
/usr/bin/python3 "$SRC/tests/fuzz_import/replay.py" "$BUILD/kiln" >/dev/null

end=$(date +%s)
echo "sanitize: clean; build $((built - start)) s, models $((models - built)) s, unit tests $((units - models)) s," \
     "table $((conformance - units)) s (with conformance), regressions $((end - conformance)) s; stage $((end - start)) s"
