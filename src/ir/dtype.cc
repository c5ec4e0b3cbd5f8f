#include "ir/dtype.h"

#include <array>

namespace kiln {

namespace {
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

Half::Half(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) {  // inf or nan
    bits = uint16_t(sign | 0x7c00u | (man ? 0x200u : 0u));
    return;
  }
  int e = int(exp) - 127 + 15;
  if (e >= 31) {  // overflow to inf
    bits = uint16_t(sign | 0x7c00u);
    return;
  }
  if (e <= 0) {  // subnormal half or zero
    if (e < -10) {
      bits = uint16_t(sign);
      return;
    }
    man |= 0x800000u;
    int shift = 14 - e;
    uint32_t half_man = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1))) half_man++;
    bits = uint16_t(sign | half_man);
    return;
  }
  uint32_t half_man = man >> 13;
  uint32_t rem = man & 0x1fffu;
  uint32_t v = sign | (uint32_t(e) << 10) | half_man;
  if (rem > 0x1000u || (rem == 0x1000u && (half_man & 1))) v++;  // may carry into exponent: correct
  bits = uint16_t(v);
}

Half::operator float() const {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t man = bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    float v = float(man) * (1.0f / 16777216.0f);  // man * 2^-24
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

BFloat16::BFloat16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // nan stays nan
    bits = uint16_t((x >> 16) | 0x40u);
    return;
  }
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  bits = uint16_t(x >> 16);
}

BFloat16::operator float() const { return bits_float(uint32_t(bits) << 16); }

namespace {
struct DTypeInfo {
  DType dt;
  const char* name;
  size_t size;
};
constexpr std::array<DTypeInfo, 14> kInfo = {{
    {DType::Undefined, "undef", 0},
    {DType::Float32, "f32", 4},
    {DType::Float64, "f64", 8},
    {DType::Float16, "f16", 2},
    {DType::BFloat16, "bf16", 2},
    {DType::Int8, "i8", 1},
    {DType::Int16, "i16", 2},
    {DType::Int32, "i32", 4},
    {DType::Int64, "i64", 8},
    {DType::UInt8, "u8", 1},
    {DType::UInt16, "u16", 2},
    {DType::UInt32, "u32", 4},
    {DType::UInt64, "u64", 8},
    {DType::Bool, "bool", 1},
}};
}  // namespace

size_t dtype_size(DType dt) { return kInfo[size_t(dt)].size; }
std::string_view dtype_name(DType dt) { return kInfo[size_t(dt)].name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.name && i.dt != DType::Undefined) return i.dt;
  return std::nullopt;
}

bool is_float(DType dt) {
  return dt == DType::Float32 || dt == DType::Float64 || dt == DType::Float16 || dt == DType::BFloat16;
}
bool is_integer(DType dt) {
  switch (dt) {
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64:
    case DType::UInt8: case DType::UInt16: case DType::UInt32: case DType::UInt64:
      return true;
    default:
      return false;
  }
}
bool is_signed(DType dt) {
  return is_float(dt) || dt == DType::Int8 || dt == DType::Int16 || dt == DType::Int32 || dt == DType::Int64;
}

}  // namespace kiln

namespace kiln {
namespace {
constexpr std::pair<int64_t, DType> kOnnxCodes[] = {
    {1, DType::Float32}, {2, DType::UInt8},   {3, DType::Int8},     {4, DType::UInt16},  {5, DType::Int16},
    {6, DType::Int32},   {7, DType::Int64},   {9, DType::Bool},     {10, DType::Float16}, {11, DType::Float64},
    {12, DType::UInt32}, {13, DType::UInt64}, {16, DType::BFloat16},
};
}  // namespace

std::optional<DType> dtype_from_onnx(int64_t code) {
  for (auto [c, d] : kOnnxCodes)
    if (c == code) return d;
  return std::nullopt;
}

int64_t dtype_to_onnx(DType dt) {
  for (auto [c, d] : kOnnxCodes)
    if (d == dt) return c;
  return 0;
}
}  // namespace kiln
