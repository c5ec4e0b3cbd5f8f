// Element types of kiln tensors. float32 is first-class; the integer and bool types carry shape and
// index computations; float64/float16/bfloat16 and the small integer types exist because ONNX
// models and the conformance tests use them.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace kiln {

enum class DType : uint8_t {
  Undefined,
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Bool,
};

// IEEE half precision stored as bits; arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f);  // round to nearest even
  operator float() const;
};

// bfloat16: the upper 16 bits of a float32.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f);  // round to nearest even
  operator float() const;
};

size_t dtype_size(DType dt);
// Short name used by the IR text form: f32, f64, f16, bf16, i8, i16, i32, i64, u8, u16, u32, u64, bool.
std::string_view dtype_name(DType dt);
std::optional<DType> dtype_from_name(std::string_view name);
bool is_float(DType dt);    // f32, f64, f16, bf16
bool is_integer(DType dt);  // signed or unsigned integers (not bool)
bool is_signed(DType dt);   // signed integers and floats

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  else if constexpr (std::is_same_v<T, double>) return DType::Float64;
  else if constexpr (std::is_same_v<T, Half>) return DType::Float16;
  else if constexpr (std::is_same_v<T, BFloat16>) return DType::BFloat16;
  else if constexpr (std::is_same_v<T, int8_t>) return DType::Int8;
  else if constexpr (std::is_same_v<T, int16_t>) return DType::Int16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::Int64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::UInt8;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::UInt16;
  else if constexpr (std::is_same_v<T, uint32_t>) return DType::UInt32;
  else if constexpr (std::is_same_v<T, uint64_t>) return DType::UInt64;
  else if constexpr (std::is_same_v<T, bool>) return DType::Bool;
  else static_assert(sizeof(T) == 0, "not a kiln element type");
}

// Calls f(T{}) with the C++ type of dt. Use dispatch_dtype(dt, [&](auto tag) { using T = decltype(tag); ... }).
template <class F>
decltype(auto) dispatch_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Int8: return f(int8_t{});
    case DType::Int16: return f(int16_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    case DType::UInt8: return f(uint8_t{});
    case DType::UInt16: return f(uint16_t{});
    case DType::UInt32: return f(uint32_t{});
    case DType::UInt64: return f(uint64_t{});
    case DType::Bool: return f(bool{});
    case DType::Undefined: break;
  }
  throw std::logic_error("dispatch_dtype: undefined dtype");
}

}  // namespace kiln

namespace kiln {
// ONNX TensorProto.DataType codes (FLOAT=1, UINT8=2, ... BFLOAT16=16), used by attributes such as
// Cast's `to`. Returns nullopt for codes kiln does not support (string, complex).
std::optional<DType> dtype_from_onnx(int64_t code);
int64_t dtype_to_onnx(DType dt);
}  // namespace kiln
