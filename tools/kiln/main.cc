// kiln — a neural-network compiler built around operator fusion. This is the command-line entry:
// it dispatches to one function per sub-command and turns errors into one line and an exit code.
#include <cstring>
#include <iostream>
#include <new>

#include "cli.h"

namespace {

const char* kUsage = R"(usage: kiln <command> [options]

commands:
  run MODEL.onnx --input NAME=FILE.npy [--input ...] --output-dir DIR [--input-shape NAME=DIMS]
                 [--threads N] [--no-cache] [--check | --reference | --fused-plan] [--device cpu|opencl|cuda]
                                                 run a model (compiled code; --check: every kernel
                                                 against the reference executor; --reference: the
                                                 interpreter); writes DIR/<output>.npy per output
  info MODEL.onnx [--input-shape NAME=DIMS]      inputs, outputs, op histogram, parameter count
  show MODEL.onnx [--after=PASS|import|all]      print the graph IR (after a pass, default: final)
  explain MODEL.onnx [--json] [--dot FILE] [--svg FILE] [--no-fusion] [--fusion-fuel N] [--target T]
                                                 the fusion plan: kernels, costs, refused fusions
  bench MODEL.onnx [--threads N] [--runs N] [--warmup N] [--json] [--compare | --kernels]
                                                 latency of the compiled model; --compare adds kiln
                                                 --no-fusion and ONNX Runtime, interleaved; --kernels
                                                 per-kernel GB/s against the probed bandwidth
  probe [--reprobe] [--json] [--threads N]       measured peak FLOP/s and cache/DRAM bandwidth (cached)
  roofline MODEL.onnx [--threads N] [--runs N] [--json] [--svg FILE] [--html FILE] [--fused-only]
                                                 each kernel's FLOPs, DRAM bytes, time and % of the
                                                 roofline, fused and --no-fusion
  compile MODEL.onnx -o DIR [--input-shape NAME=DIMS] [--no-fusion] [--target T] [--threads N]
                                                 ahead of time: a C bundle (kiln_model.h/.c,
                                                 weights.bin, Makefile) that runs without kiln
  emit MODEL.onnx [--device cpu|opencl|cuda] [-o FILE] [--nvrtc sm_80,sm_90]
                                                 the kernels' source for one target; --nvrtc
                                                 compiles the CUDA source to PTX per architecture
  tune MODEL.onnx [--budget 10m|90s] [--threads N] [--records FILE] [--input NAME=FILE.npy]
                 [--no-fusion-search] [--samples FILE] [--measurer local|ray --ray-address HOST:PORT]
                 [--no-filter] [--compile-jobs N]
                                                 measure close fusion decisions fused and apart,
                                                 search per-kernel schedules, record both; run,
                                                 bench, compile and explain then use matching
                                                 records (--records FILE, --no-records)
  tune --merge A.jsonl B.jsonl ... -o C.jsonl    combine records databases
  tune-worker REQUEST RESULT                     one measurement job of tune --measurer ray (internal)
  calibrate [MODEL.onnx ...] [--threads N] [--runs N] [--samples FILE] [--json]
                                                 time every kernel, keep them as cost-model samples,
                                                 fit per-class factors (roofline, explain and
                                                 --target native use them); per model: estimate
                                                 vs measured, before and after
  test-onnx DIR... [--expect FILE] [--write-passed FILE] [--compiled [--device D]]
                                                 run ONNX backend-test folders
  help                                           this text

options for commands that load a model:
  --input-shape NAME=DIMS   fix symbolic input dims, e.g. --input-shape x=1x3x224x224
  --dump-after=PASS|all     print the IR after a simplification pass (to stderr)
  --disable-pass=PASS       skip a simplification pass
  --time-passes             print per-pass wall time (to stderr)
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "run") return kiln::cli::cmd_run(args);
    if (cmd == "info") return kiln::cli::cmd_info(args);
    if (cmd == "show") return kiln::cli::cmd_show(args);
    if (cmd == "test-onnx") return kiln::cli::cmd_test_onnx(args);
    if (cmd == "explain") return kiln::cli::cmd_explain(args);
    if (cmd == "bench") return kiln::cli::cmd_bench(args);
    if (cmd == "compile") return kiln::cli::cmd_compile(args);
    if (cmd == "emit") return kiln::cli::cmd_emit(args);
    if (cmd == "probe") return kiln::cli::cmd_probe(args);
    if (cmd == "roofline") return kiln::cli::cmd_roofline(args);
    if (cmd == "tune") return kiln::cli::cmd_tune(args);
    if (cmd == "calibrate") return kiln::cli::cmd_calibrate(args);
    if (cmd == "tune-worker") return kiln::cli::cmd_tune_worker(args);
    std::cerr << "kiln: error: unknown command '" << cmd << "' (see kiln help)\n";
    return 2;
  } catch (const kiln::UserError& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    // Sizes from models are checked against the bytes present before allocation; what still runs
    // out is a model too large for this machine, not a kiln bug.
    std::cerr << "kiln: error: out of memory\n";
    return 1;
  } catch (const kiln::InternalError& e) {
    std::cerr << "kiln: " << e.what() << "\n(this is a bug in kiln; please report it with the model)\n";
    return 70;
  } catch (const std::exception& e) {
    std::cerr << "kiln: internal error: " << e.what() << "\n";
    return 70;
  }
}
