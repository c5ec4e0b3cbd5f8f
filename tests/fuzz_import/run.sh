#!/usr/bin/env bash
# Builds kiln_import_fuzzer with clang (libFuzzer + ASan + UBSan) in the sanitizer build BUILD_DIR and fuzzes the
# ONNX importer for SECONDS. Usage: run.sh BUILD_DIR SECONDS [JOBS]
#
# Seeds: every .onnx of /usr/share/libonnx-testdata plus tests/fuzz_import/regressions (past
# findings); the evolving corpus is kept in BUILD_DIR/corpus between runs. A finding (crash,
# sanitizer report, internal error, timeout, out-of-memory) stops the run with a nonzero status
# and leaves its input in BUILD_DIR/artifacts; turn it into tests/fuzz_import/regressions/NAME.onnx.
set -euo pipefail
BUILD=${1:?build dir}
SECS=${2:-60}
JOBS=${3:-2}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
"$SRC/tests/sanitize/configure.sh" "$BUILD"  # the sanitizer build (make sanitize) is this build
cmake --build "$BUILD" -j "$JOBS" --target kiln_import_fuzzer

mkdir -p "$BUILD/corpus" "$BUILD/artifacts" "$BUILD/seeds"
if [ -z "$(ls -A "$BUILD/seeds")" ]; then
  # Flat copies (libFuzzer reads one folder level); names made unique from the test folders.
  find /usr/share/libonnx-testdata -name '*.onnx' | while read -r f; do
    cp "$f" "$BUILD/seeds/$(echo "${f#/usr/share/libonnx-testdata/}" | tr '/' '_')"
  done
fi
cp "$SRC"/tests/fuzz_import/regressions/*.onnx "$BUILD/seeds/" 2>/dev/null || true

# -rss_limit_mb / -malloc_limit_mb: an input of at most 64 KiB that makes the importer allocate
# more than 512 MB is itself a finding (issue 15's memory amplification).
# detect_leaks=0: the importer keeps process-wide registries (libonnx schemas) alive on purpose.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$BUILD"
# FUZZ_ARGS adds libFuzzer options, e.g. FUZZ_ARGS="-fork=1 -ignore_crashes=1 -ignore_ooms=1" to
# keep going past findings in a long run (each is still written to artifacts/).
# shellcheck disable=SC2086
exec ./kiln_import_fuzzer corpus seeds -max_total_time="$SECS" -max_len=65536 -timeout=20 \
  -rss_limit_mb=1024 -malloc_limit_mb=512 -artifact_prefix=artifacts/ -print_final_stats=1 ${FUZZ_ARGS:-}
