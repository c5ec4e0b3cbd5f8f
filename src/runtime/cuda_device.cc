// The CUDA device (runtime/device.h): kernels compiled by NVRTC to PTX for the device's compute
// capability, loaded with the driver API (cuModuleLoadData) and launched on one stream in blocks
// of codegen::kCudaBlock threads. libcuda is opened at run time (dlopen), not linked: kiln must
// start on machines without an NVIDIA driver, where --device cuda is one line of error.
// Not done yet: capturing the launches as one CUDA graph (per-inference launch overhead).
#include "runtime/device.h"

#ifdef KILN_HAVE_CUDA
#include <cuda.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include "codegen/cuda/cuda_emitter.h"
#include "support/error.h"

namespace kiln::runtime {

std::string nvrtc_ptx(const std::string& source, const std::string& arch) {
  nvrtcProgram prog = nullptr;
  if (nvrtcCreateProgram(&prog, source.c_str(), "kiln_kernels.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
    throw InternalError("NVRTC: nvrtcCreateProgram failed");
  const std::string arch_opt = "--gpu-architecture=compute_" + arch.substr(arch.find('_') + 1);
  // --fmad=true: contractions may fuse (docs/codegen.md "Numerics contract"); no fast math.
  const char* opts[] = {arch_opt.c_str(), "--fmad=true", "--std=c++17"};
  const nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    const size_t e = log.find("error");
    size_t start = e == std::string::npos ? 0 : log.rfind('\n', e);
    start = start == std::string::npos ? 0 : start + 1;
    throw InternalError(cat("NVRTC (", arch, "): the generated program does not compile: ",
                            log.substr(start, log.find('\n', start) - start), "\n", log));
  }
  nvrtcGetPTXSize(prog, &n);
  std::string ptx(n, '\0');
  nvrtcGetPTX(prog, ptx.data());
  nvrtcDestroyProgram(&prog);
  return ptx;
}

namespace {

// The driver API entry points kiln uses, from libcuda.so.1.
struct Driver {
  void* lib = nullptr;
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*CtxCreate)(CUcontext*, unsigned, CUdevice);
  CUresult (*CtxDestroy)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void**, void**);

  template <class F>
  void sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (!f) user_error("--device cuda: the CUDA driver has no ", name, " (driver too old)");
  }
};

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw InternalError(cat("CUDA: ", what, " failed with error ", int(r)));
}

class CudaDevice final : public Device {
 public:
  CudaDevice() {
    d_.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d_.lib) user_error("--device cuda: no CUDA driver on this machine (libcuda.so.1 cannot be loaded)");
    d_.sym(d_.Init, "cuInit");
    d_.sym(d_.DeviceGetCount, "cuDeviceGetCount");
    d_.sym(d_.DeviceGet, "cuDeviceGet");
    d_.sym(d_.DeviceGetName, "cuDeviceGetName");
    d_.sym(d_.DeviceGetAttribute, "cuDeviceGetAttribute");
    d_.sym(d_.CtxCreate, "cuCtxCreate_v2");
    d_.sym(d_.CtxDestroy, "cuCtxDestroy_v2");
    d_.sym(d_.ModuleLoadData, "cuModuleLoadData");
    d_.sym(d_.ModuleGetFunction, "cuModuleGetFunction");
    d_.sym(d_.MemAlloc, "cuMemAlloc_v2");
    d_.sym(d_.MemFree, "cuMemFree_v2");
    d_.sym(d_.MemcpyHtoD, "cuMemcpyHtoD_v2");
    d_.sym(d_.MemcpyDtoH, "cuMemcpyDtoH_v2");
    d_.sym(d_.MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    d_.sym(d_.StreamCreate, "cuStreamCreate");
    d_.sym(d_.StreamSynchronize, "cuStreamSynchronize");
    d_.sym(d_.LaunchKernel, "cuLaunchKernel");
    int count = 0;
    if (d_.Init(0) != CUDA_SUCCESS || d_.DeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
      user_error("--device cuda: the CUDA driver finds no GPU on this machine");
    check(d_.DeviceGet(&dev_, 0), "cuDeviceGet");
    check(d_.CtxCreate(&ctx_, 0, dev_), "cuCtxCreate");
    check(d_.StreamCreate(&stream_, 0), "cuStreamCreate");
  }
  ~CudaDevice() override {
    if (ctx_) d_.CtxDestroy(ctx_);  // frees the module, buffers and stream with it
  }

  std::string description() const override {
    char name[256] = {};
    d_.DeviceGetName(name, sizeof name, dev_);
    return name;
  }

  void build(const codegen::DeviceProgram& program) override {
    int major = 0, minor = 0;
    check(d_.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_), "cuDeviceGetAttribute");
    check(d_.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_), "cuDeviceGetAttribute");
    const std::string ptx = nvrtc_ptx(program.source, "sm_" + std::to_string(major * 10 + minor));
    check(d_.ModuleLoadData(&module_, ptx.c_str()), "cuModuleLoadData");
    for (const auto& k : program.kernels) {
      launches_.push_back({});
      for (const auto& l : k.launches) {
        CUfunction f = nullptr;
        check(d_.ModuleGetFunction(&f, module_, l.function.c_str()), "cuModuleGetFunction");
        launches_.back().push_back({f, l.work_items});
      }
    }
  }
  int alloc(int64_t bytes) override {
    CUdeviceptr p = 0;
    if (d_.MemAlloc(&p, size_t(std::max<int64_t>(bytes, 1))) != CUDA_SUCCESS)
      user_error("--device cuda: cannot allocate ", bytes, " bytes on ", description());
    buffers_.push_back(p);
    return int(buffers_.size() - 1);
  }
  CUdeviceptr at(DevicePtr p) const { return buffers_.at(size_t(p.buffer)) + CUdeviceptr(p.offset); }
  void upload(DevicePtr dst, const void* src, int64_t bytes) override {
    check(d_.StreamSynchronize(stream_), "cuStreamSynchronize");
    check(d_.MemcpyHtoD(at(dst), src, size_t(bytes)), "cuMemcpyHtoD");
  }
  void download(void* dst, DevicePtr src, int64_t bytes) override {
    check(d_.StreamSynchronize(stream_), "cuStreamSynchronize");
    check(d_.MemcpyDtoH(dst, at(src), size_t(bytes)), "cuMemcpyDtoH");
  }
  void copy(DevicePtr dst, DevicePtr src, int64_t bytes) override {
    check(d_.MemcpyDtoDAsync(at(dst), at(src), size_t(bytes), stream_), "cuMemcpyDtoD");
  }
  void launch(size_t kernel, size_t launch, const std::vector<DevicePtr>& args, DevicePtr scratch) override {
    const auto& [f, items] = launches_.at(kernel).at(launch);
    std::vector<CUdeviceptr> ptrs;
    for (const DevicePtr& p : args) ptrs.push_back(at(p));
    ptrs.push_back(at(scratch));
    std::vector<void*> params;
    for (auto& p : ptrs) params.push_back(&p);
    const int64_t block = codegen::kCudaBlock, grid = (items + block - 1) / block;
    check(d_.LaunchKernel(f, unsigned(grid), 1, 1, unsigned(block), 1, 1, 0, stream_, params.data(), nullptr),
          "cuLaunchKernel");
  }
  void finish() override { check(d_.StreamSynchronize(stream_), "cuStreamSynchronize"); }

 private:
  Driver d_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<CUdeviceptr> buffers_;
  std::vector<std::vector<std::pair<CUfunction, int64_t>>> launches_;
};

}  // namespace

std::unique_ptr<Device> open_cuda_device() { return std::make_unique<CudaDevice>(); }

}  // namespace kiln::runtime

#else
#include "support/error.h"

namespace kiln::runtime {
std::string nvrtc_ptx(const std::string&, const std::string&) {
  user_error("this kiln was built without NVRTC (no CUDA toolkit at configure time)");
}
}  // namespace kiln::runtime
#endif
