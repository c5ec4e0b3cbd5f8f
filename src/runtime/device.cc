#include "runtime/device.h"

#include "support/error.h"

namespace kiln::runtime {

#ifdef KILN_HAVE_OPENCL
std::unique_ptr<Device> open_opencl_device();
#endif
#ifdef KILN_HAVE_CUDA
std::unique_ptr<Device> open_cuda_device();
#endif

std::unique_ptr<Device> open_device(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::OpenCL:
#ifdef KILN_HAVE_OPENCL
      return open_opencl_device();
#else
      user_error("--device opencl: this kiln was built without OpenCL (no OpenCL headers and ICD loader at configure time)");
#endif
    case DeviceKind::Cuda:
#ifdef KILN_HAVE_CUDA
      return open_cuda_device();
#else
      user_error("--device cuda: this kiln was built without CUDA (no CUDA toolkit with NVRTC at configure time)");
#endif
    case DeviceKind::Cpu: break;
  }
  throw InternalError("open_device: the host is not a device");
}

}  // namespace kiln::runtime
