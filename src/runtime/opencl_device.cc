// The OpenCL device (runtime/device.h) through the standard ICD loader: the first platform with a
// device, one context, one in-order queue. The program is built once per Executable with
// -cl-fp32-correctly-rounded-divide-sqrt where the device supports it (so / and sqrt round as the
// host's do); PoCL caches the compiled binary itself ($POCL_CACHE_DIR or ~/.cache/pocl), keyed by
// source and options, so a model built again skips LLVM.
#include "runtime/device.h"

#ifdef KILN_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <cstring>

#include "support/error.h"

namespace kiln::runtime {

namespace {

void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS) throw InternalError(cat("OpenCL: ", what, " failed with error ", err));
}

std::string info_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  clGetDeviceInfo(d, what, 0, nullptr, &n);
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

class OpenCLDevice final : public Device {
 public:
  OpenCLDevice() {
    cl_uint np = 0;
    if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0)
      user_error("--device opencl: no OpenCL platform (install an ICD, e.g. pocl-opencl-icd)");
    std::vector<cl_platform_id> platforms(np);
    clGetPlatformIDs(np, platforms.data(), nullptr);
    for (cl_platform_id p : platforms) {
      cl_uint nd = 0;
      if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &device_, &nd) == CL_SUCCESS && nd > 0) break;
      device_ = nullptr;
    }
    if (!device_) user_error("--device opencl: no OpenCL device on any of ", np, " platforms");
    cl_int err = 0;
    context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
    check(err, "clCreateContext");
    queue_ = clCreateCommandQueue(context_, device_, 0, &err);
    check(err, "clCreateCommandQueue");
  }
  ~OpenCLDevice() override {
    for (cl_kernel k : kernels_) clReleaseKernel(k);
    if (program_) clReleaseProgram(program_);
    for (cl_mem m : buffers_) clReleaseMemObject(m);
    if (queue_) clReleaseCommandQueue(queue_);
    if (context_) clReleaseContext(context_);
  }

  std::string description() const override {
    return info_string(device_, CL_DEVICE_NAME) + " (" + info_string(device_, CL_DEVICE_VERSION) + ")";
  }

  void build(const codegen::DeviceProgram& program) override {
    const char* src = program.source.c_str();
    const size_t len = program.source.size();
    cl_int err = 0;
    program_ = clCreateProgramWithSource(context_, 1, &src, &len, &err);
    check(err, "clCreateProgramWithSource");
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(device_, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, nullptr);
    std::string options = "-cl-std=CL1.2";
    if (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) options += " -cl-fp32-correctly-rounded-divide-sqrt";
    if (clBuildProgram(program_, 1, &device_, options.c_str(), nullptr, nullptr) != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
      // kiln's own output failed to build: a kiln bug. The first error line, then the log.
      size_t e = log.find("error");
      size_t start = e == std::string::npos ? 0 : log.rfind('\n', e);
      start = start == std::string::npos ? 0 : start + 1;
      throw InternalError(cat("OpenCL: the generated program does not build: ",
                              log.substr(start, log.find('\n', start) - start), "\n", log));
    }
    for (const auto& k : program.kernels) {
      launches_.push_back({});
      for (const auto& l : k.launches) {
        cl_kernel kern = clCreateKernel(program_, l.function.c_str(), &err);
        check(err, "clCreateKernel");
        kernels_.push_back(kern);
        launches_.back().push_back({kern, l.work_items});
      }
    }
  }

  int alloc(int64_t bytes) override {
    cl_int err = 0;
    cl_mem m = clCreateBuffer(context_, CL_MEM_READ_WRITE, size_t(std::max<int64_t>(bytes, 1)), nullptr, &err);
    if (err == CL_INVALID_BUFFER_SIZE || err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY)
      user_error("--device opencl: cannot allocate ", bytes, " bytes on ", description());
    check(err, "clCreateBuffer");
    buffers_.push_back(m);
    return int(buffers_.size() - 1);
  }
  void upload(DevicePtr dst, const void* src, int64_t bytes) override {
    // Blocking: the host memory (a library kernel's temporary) may be gone when the call returns.
    check(clEnqueueWriteBuffer(queue_, buffers_.at(size_t(dst.buffer)), CL_TRUE, size_t(dst.offset), size_t(bytes), src,
                               0, nullptr, nullptr),
          "clEnqueueWriteBuffer");
  }
  void download(void* dst, DevicePtr src, int64_t bytes) override {
    check(clEnqueueReadBuffer(queue_, buffers_.at(size_t(src.buffer)), CL_TRUE, size_t(src.offset), size_t(bytes), dst,
                              0, nullptr, nullptr),
          "clEnqueueReadBuffer");
  }
  void copy(DevicePtr dst, DevicePtr src, int64_t bytes) override {
    check(clEnqueueCopyBuffer(queue_, buffers_.at(size_t(src.buffer)), buffers_.at(size_t(dst.buffer)),
                              size_t(src.offset), size_t(dst.offset), size_t(bytes), 0, nullptr, nullptr),
          "clEnqueueCopyBuffer");
  }
  void launch(size_t kernel, size_t launch, const std::vector<DevicePtr>& args, DevicePtr scratch) override {
    const auto& [k, items] = launches_.at(kernel).at(launch);
    cl_uint a = 0;
    for (const DevicePtr& p : args) {
      const cl_ulong off = cl_ulong(p.offset);
      check(clSetKernelArg(k, a++, sizeof(cl_mem), &buffers_.at(size_t(p.buffer))), "clSetKernelArg");
      check(clSetKernelArg(k, a++, sizeof off, &off), "clSetKernelArg");
    }
    check(clSetKernelArg(k, a++, sizeof(cl_mem), &buffers_.at(size_t(scratch.buffer))), "clSetKernelArg");
    const size_t global = size_t(items);
    check(clEnqueueNDRangeKernel(queue_, k, 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
          "clEnqueueNDRangeKernel");
  }
  void finish() override { check(clFinish(queue_), "clFinish"); }

 private:
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  cl_program program_ = nullptr;
  std::vector<cl_mem> buffers_;
  std::vector<cl_kernel> kernels_;
  std::vector<std::vector<std::pair<cl_kernel, int64_t>>> launches_;
};

}  // namespace

std::unique_ptr<Device> open_opencl_device() { return std::make_unique<OpenCLDevice>(); }

}  // namespace kiln::runtime
#endif
