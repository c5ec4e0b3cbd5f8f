#include "frontend/onnx/tensor_proto.h"

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

// Reads external data (ONNX "external_data" key/values) for `p` from a file inside model_dir.
std::string read_external(const onnx::TensorProto& p, const std::string& model_dir, const std::string& what,
                          size_t expected_bytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = std::stoll(kv.value());
    else if (kv.key() == "length") length = std::stoll(kv.value());
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
  std::ifstream f(full, std::ios::binary);
  if (!f) user_error(what, ": cannot open external data file '", location, "'");
  if (offset < 0) user_error(what, ": negative external data offset");
  f.seekg(0, std::ios::end);
  int64_t size = f.tellg();
  if (length < 0) length = size - offset;
  if (offset + length > size || length != int64_t(expected_bytes))
    user_error(what, ": external data file '", location, "' holds ", size - offset, " bytes at offset ", offset,
               ", tensor needs ", expected_bytes);
  std::string buf(size_t(length), '\0');
  f.seekg(offset);
  f.read(buf.data(), length);
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
  Tensor t(dt, shape);
  const int64_t n = t.numel();
  if (p.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    std::string buf = read_external(p, model_dir, what, t.nbytes());
    std::memcpy(t.raw(), buf.data(), buf.size());
    return t;
  }
  if (p.has_raw_data()) {
    if (p.raw_data().size() != t.nbytes())
      user_error(what, ": raw data has ", p.raw_data().size(), " bytes, ", TensorType{dt, shape}.str(), " needs ",
                 t.nbytes());
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
