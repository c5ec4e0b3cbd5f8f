#include "frontend/onnx/tensor_proto.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "frontend/onnx/onnx_import.h"

namespace kiln {

namespace fs = std::filesystem;

DType dtype_from_onnx_checked(int32_t elem_type, const std::string& what) {
  auto dt = dtype_from_onnx(elem_type);
  if (!dt) {
    const char* name = onnx::TensorProto_DataType_IsValid(elem_type)
                           ? onnx::TensorProto_DataType_Name(onnx::TensorProto_DataType(elem_type)).c_str()
                           : "unknown";
    user_error(what, ": element type ", name, " (", elem_type, ") is not supported");
  }
  return *dt;
}

namespace {

// An external_data offset or length: decimal digits only, at most 2^62 (stoll would throw on "abc"
// and on 10^20, and a sum of two such values could overflow).
int64_t external_number(const std::string& key, const std::string& v, const std::string& what) {
  constexpr int64_t kMax = int64_t(1) << 62;
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos || std::stoull(v) > uint64_t(kMax)) {
    if (!v.empty() && v[0] == '-' && v.size() > 1 && v.find_first_not_of("0123456789", 1) == std::string::npos)
      user_error(what, ": negative external data ", key);
    user_error(what, ": external data ", key, " '", v, "' is not a non-negative integer");
  }
  return int64_t(std::stoull(v));
}

// Reads external data (ONNX "external_data" key/values) for `p` from a regular file inside
// model_dir. Only a regular file: a FIFO or a device would block or never end, a directory has no
// bytes. Sizes are checked before the buffer is allocated.
std::string read_external(const onnx::TensorProto& p, const std::string& model_dir, const std::string& what,
                          uint64_t expected_bytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = external_number("offset", kv.value(), what);
    else if (kv.key() == "length") length = external_number("length", kv.value(), what);
  }
  if (location.empty()) user_error(what, ": external data has no location");
  if (model_dir.empty()) user_error(what, ": external data is not allowed here");
  fs::path rel(location);
  if (rel.is_absolute()) user_error(what, ": external data path '", location, "' is absolute; it must lie inside the model's folder");
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(model_dir), ec);
  fs::path full = fs::weakly_canonical(base / rel, ec);
  auto [bend, fend] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (ec || bend != base.end())
    user_error(what, ": external data path '", location, "' escapes the model's folder");
  // Opened without blocking (a FIFO with no writer would hang in open), then checked on the
  // descriptor, so that what is read is what was checked.
  const int fd = ::open(full.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) user_error(what, ": cannot open external data file '", location, "'");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    user_error(what, ": external data '", location, "' is not a regular file");
  }
  ::close(fd);
  const int64_t size = st.st_size;
  if (offset > size)
    user_error(what, ": external data offset ", offset, " is past the end of '", location, "' (", size, " bytes)");
  if (length >= 0 && uint64_t(length) != expected_bytes)
    user_error(what, ": external data length ", length, " bytes, tensor needs ", expected_bytes);
  if (length < 0) length = size - offset;
  if (uint64_t(length) != expected_bytes || offset + length > size)
    user_error(what, ": external data file '", location, "' holds ", size - offset, " bytes at offset ", offset,
               ", tensor needs ", expected_bytes);
  std::ifstream f(full, std::ios::binary);
  if (!f) user_error(what, ": cannot open external data file '", location, "'");
  std::string buf(size_t(length), '\0');
  f.seekg(offset);
  if (!f.read(buf.data(), length)) user_error(what, ": cannot read external data file '", location, "'");
  return buf;
}

template <class Field>
void check_count(const Field& f, int64_t n, const std::string& what) {
  if (int64_t(f.size()) != n) user_error(what, ": tensor data has ", f.size(), " values, shape needs ", n);
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& model_dir, const std::string& what) {
  if (p.has_segment()) user_error(what, ": segmented tensors are not supported");
  DType dt = dtype_from_onnx_checked(p.data_type(), what);
  Shape shape(p.dims().begin(), p.dims().end());
  for (int64_t d : shape)
    if (d < 0) user_error(what, ": negative dimension in ", shape_str(shape));
  int64_t n = 0;
  try {
    n = shape_numel(shape);
  } catch (const UserError& e) {
    user_error(what, ": ", e.what());
  }
  const size_t es = dtype_size(dt);
  if (n > 0 && uint64_t(n) > (uint64_t(1) << 62) / es) user_error(what, ": shape ", shape_str(shape), " is too large");
  const uint64_t nbytes = uint64_t(n) * es;
  // What the proto holds is checked against what the shape declares before the tensor is
  // allocated: a 60-byte initializer declaring 4 GiB must not cost 4 GiB.
  std::string external;
  if (p.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    external = read_external(p, model_dir, what, nbytes);
  } else if (p.has_raw_data()) {
    if (p.raw_data().size() != nbytes)
      user_error(what, ": raw data has ", p.raw_data().size(), " bytes, ", TensorType{dt, shape}.str(), " needs ", nbytes);
  } else {
    const int64_t have = dt == DType::Float32                           ? p.float_data_size()
                         : dt == DType::Float64                         ? p.double_data_size()
                         : dt == DType::Int64                           ? p.int64_data_size()
                         : dt == DType::UInt32 || dt == DType::UInt64 ? p.uint64_data_size()
                                                                        : p.int32_data_size();
    if (have != n) user_error(what, ": tensor data has ", have, " values, shape needs ", n);
  }
  Tensor t;
  try {
    t = Tensor(dt, shape);
  } catch (const UserError& e) {
    user_error(what, ": ", e.what());
  }
  if (p.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    if (!external.empty()) std::memcpy(t.raw(), external.data(), external.size());
    return t;
  }
  if (p.has_raw_data()) {
    if (t.nbytes()) std::memcpy(t.raw(), p.raw_data().data(), t.nbytes());  // ONNX raw data is little-endian
    return t;
  }
  switch (dt) {
    case DType::Float32:
      check_count(p.float_data(), n, what);
      std::copy(p.float_data().begin(), p.float_data().end(), t.data<float>());
      break;
    case DType::Float64:
      check_count(p.double_data(), n, what);
      std::copy(p.double_data().begin(), p.double_data().end(), t.data<double>());
      break;
    case DType::Int64:
      check_count(p.int64_data(), n, what);
      std::copy(p.int64_data().begin(), p.int64_data().end(), t.data<int64_t>());
      break;
    case DType::UInt32:
    case DType::UInt64:
      check_count(p.uint64_data(), n, what);
      dispatch_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_integral_v<T>)
          for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = T(p.uint64_data(int(i)));
      });
      break;
    case DType::Float16:
    case DType::BFloat16:
      // int32_data holds the 16-bit patterns.
      check_count(p.int32_data(), n, what);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits = uint16_t(p.int32_data(int(i)));
        std::memcpy(static_cast<uint8_t*>(t.raw()) + 2 * i, &bits, 2);
      }
      break;
    default:  // int8/16/32, uint8/16, bool live in int32_data
      check_count(p.int32_data(), n, what);
      dispatch_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_integral_v<T>)
          for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = T(p.int32_data(int(i)));
      });
      break;
  }
  return t;
}

Tensor read_tensor_proto_file(const std::string& path, std::string* name) {
  std::ifstream f(path, std::ios::binary);
  if (!f) user_error(path, ": cannot open file");
  onnx::TensorProto p;
  if (!p.ParseFromIstream(&f)) user_error(path, ": not a valid onnx.TensorProto (truncated or malformed)");
  if (name) *name = p.name();
  return tensor_from_proto(p, fs::path(path).parent_path().string(), path);
}

}  // namespace kiln
