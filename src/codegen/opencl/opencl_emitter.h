// The OpenCL C target of the C-style emitter (codegen/gpu/gpu_emitter.h describes the launch
// mapping it shares with CUDA). OpenCL C 1.2 with cl_khr_fp64; built by clBuildProgram
// (runtime/opencl_device.h). Every buffer parameter is a `__global uchar*` and a byte offset
// (`ulong`), so the host passes one planned arena as one cl_mem at each tensor's offset instead
// of sub-buffers (whose offsets must be aligned to the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN).
#pragma once
#include <vector>

#include "codegen/gpu/gpu_emitter.h"

namespace kiln::codegen {

// `opts.strict_fp` is refused: the device's libm is not the reference's.
DeviceProgram emit_opencl(const std::vector<loop::LoopKernel>& kernels, const EmitOptions& opts = {});

}  // namespace kiln::codegen
