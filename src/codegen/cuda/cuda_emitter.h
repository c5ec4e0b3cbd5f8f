// The CUDA C target of the C-style emitter (codegen/gpu/gpu_emitter.h describes the launch mapping
// it shares with OpenCL): one `extern "C" __global__` function per launch, compiled at run time by
// NVRTC (runtime/cuda_device.h) and launched with blocks of kCudaBlock threads over the
// work-items. Parameters are device pointers (the host adds each tensor's arena offset).
#pragma once
#include <vector>

#include "codegen/gpu/gpu_emitter.h"

namespace kiln::codegen {

inline constexpr int kCudaBlock = 128;  // threads per block of every launch

// `opts.strict_fp` is refused: the device's libm is not the reference's.
DeviceProgram emit_cuda(const std::vector<loop::LoopKernel>& kernels, const EmitOptions& opts = {});

}  // namespace kiln::codegen
