#!/usr/bin/env bash
# The CI sanitizer stage: kiln and its unit tests built with clang and -fsanitize=address,undefined
# (KILN_SANITIZE=ON, tests/sanitize/configure.sh) into BUILD_DIR, then run under it: every unit test, the public models
# (compiled with every kernel checked against the reference, so both executors run), the
# bad-input table and the importer's fuzz regressions. Any ASan/UBSan/LSan report fails the stage.
# Usage: run.sh BUILD_DIR [JOBS]. Prints the stage's wall time at the end.
set -euo pipefail
BUILD=${1:?build dir}
JOBS=${2:-2}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
start=$(date +%s)

"$SRC/tests/sanitize/configure.sh" "$BUILD"
cmake --build "$BUILD" -j "$JOBS" --target kiln kiln_unit_tests kiln_import_fuzzer
built=$(date +%s)

# halt_on_error / abort_on_error: the first report fails the command, so nothing is missed in a log.
# The suppressions (tests/sanitize/*.supp) each say why they are there.
export ASAN_OPTIONS="abort_on_error=1:halt_on_error=1:detect_leaks=1:suppressions=$SRC/tests/sanitize/asan.supp"
export LSAN_OPTIONS="suppressions=$SRC/tests/sanitize/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export KILN_SANITIZED=1   # the bad-input table skips its RSS bound (ASan's shadow memory)
export XDG_CACHE_HOME="$BUILD/jit-cache"

echo "sanitize: unit tests"
# LowerGroup.PublicModels and LowerContraction.PublicModels are opt-in (KILN_LOWER_MODELS) as in ctest.
(cd "$BUILD/tests" && ./kiln_unit_tests --gtest_brief=1)

echo "sanitize: public models (compiled, every kernel against the reference)"
KILN_RUN_MODE=check "$SRC/tests/models/run_models.sh" "$BUILD/models" "$BUILD/kiln" demo mlp_ln encoder resnet18 mobilenet_v2

echo "sanitize: bad-input table"
/usr/bin/python3 "$SRC/tests/cli/run_bad_inputs.py" "$BUILD/kiln" >/dev/null

echo "sanitize: importer fuzz regressions"
/usr/bin/python3 "$SRC/tests/fuzz_import/replay.py" "$BUILD/kiln"

end=$(date +%s)
echo "sanitize: clean; build $((built - start)) s, tests $((end - built)) s, stage $((end - start)) s"
