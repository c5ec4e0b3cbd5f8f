// Devices other than the host CPU (OpenCL, CUDA): the few operations the executable needs of
// one — buffers, copies, a program built once, launches in order on one queue — and the executor
// that runs a model's plan on one (device_executor.cc). Each backend is one file
// (opencl_device.cc, cuda_device.cc) compiled when its SDK was found at configure time.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/gpu/gpu_emitter.h"

namespace kiln::runtime {

enum class DeviceKind { Cpu, OpenCL, Cuda };
// "cpu", "opencl", "cuda"; UserError naming the choices otherwise.
DeviceKind parse_device(const std::string& s);
const char* device_name(DeviceKind k);

// A place in device memory: buffer `buffer` (an index the device gave out) at byte `offset`.
struct DevicePtr {
  int buffer = -1;
  int64_t offset = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string description() const = 0;  // platform and device names
  // Compiles `program` (UserError/InternalError naming the build log's first error).
  virtual void build(const codegen::DeviceProgram& program) = 0;
  virtual int alloc(int64_t bytes) = 0;  // a new buffer of at least 1 byte
  virtual void upload(DevicePtr dst, const void* src, int64_t bytes) = 0;
  virtual void download(void* dst, DevicePtr src, int64_t bytes) = 0;  // waits for the queue
  virtual void copy(DevicePtr dst, DevicePtr src, int64_t bytes) = 0;  // regions must not overlap
  // Launch `launch` of kernel `kernel` of the built program with its buffer arguments (inputs,
  // then outputs) and the scratch buffer, after everything enqueued before it.
  virtual void launch(size_t kernel, size_t launch, const std::vector<DevicePtr>& args, DevicePtr scratch) = 0;
  virtual void finish() = 0;
};

// The device `kind` (not Cpu), or a UserError of one line when there is none (no driver, no
// platform, no device, or kiln built without that backend).
std::unique_ptr<Device> open_device(DeviceKind kind);

}  // namespace kiln::runtime

namespace kiln::runtime {

// PTX for CUDA C `source` compiled by NVRTC for `arch` ("sm_80", "sm_90"); InternalError with the
// first error line and the log when it does not compile (the source is kiln's), UserError when kiln
// was built without NVRTC.
std::string nvrtc_ptx(const std::string& source, const std::string& arch);

}  // namespace kiln::runtime
