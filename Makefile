# kiln: the two commands a newcomer needs are `make demo` and `make test`; both install what they
# need first (scripts/setup.sh is idempotent and quick when everything is present).
BUILD_DIR ?= build
JOBS ?= $(shell nproc)

.PHONY: all build setup test demo clean conformance-report fuzz sanitize fuzz-import

all: build

setup:
	@scripts/setup.sh

# ccache, when installed (scripts/setup.sh installs it): rebuilds are cheaper, and the Python wheel
# test (python_wheel) reuses the objects of this build instead of compiling the library again.
CCACHE_LAUNCHER := $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CCACHE_LAUNCHER) >/dev/null

build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: setup build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo: setup build
	@scripts/demo.sh

clean:
	rm -rf $(BUILD_DIR)

# Re-measures ONNX conformance: rewrites docs/conformance.md and the CI list of passing tests.
conformance-report: build
	/usr/bin/python3 tests/onnx/conformance_report.py $(BUILD_DIR)/kiln /usr/share/libonnx-testdata/data \
	  docs/conformance.md tests/onnx/expected_pass.txt

# Differential fuzzing on random ONNX graphs (tests/fuzz/README.md): SEEDS graphs from seed START
# through kiln's reference, fused and --no-fusion paths and ONNX Runtime. Failing cases are kept
# under $(BUILD_DIR)/fuzz-failures with the command that reproduces each.
SEEDS ?= 1000
START ?= 0
fuzz: build
	/usr/bin/python3 tests/fuzz/run_fuzz.py --kiln $(BUILD_DIR)/kiln --start $(START) --count $(SEEDS) \
	  --jobs $(JOBS) --keep $(BUILD_DIR)/fuzz-failures

# Sanitizer stage (CI): kiln, the unit tests and the importer fuzzer built with clang and
# -fsanitize=address,undefined into $(BUILD_DIR)-sanitize; the unit tests, the public models and the
# bad-input table run under it (tests/sanitize/run.sh).
sanitize:
	@scripts/setup.sh
	tests/sanitize/run.sh $(BUILD_DIR)-sanitize $(JOBS)

# Importer fuzzer (libFuzzer, clang; tests/fuzz_import/README.md): SECONDS of fuzzing from the
# libonnx-testdata seeds plus the corpus kept in $(BUILD_DIR)-sanitize/corpus (the sanitizer build).
# Findings are written to $(BUILD_DIR)-sanitize/artifacts; each becomes a file in
# tests/fuzz_import/regressions/.
SECONDS ?= 60
fuzz-import:
	@scripts/setup.sh
	tests/fuzz_import/run.sh $(BUILD_DIR)-sanitize $(SECONDS) $(JOBS)
