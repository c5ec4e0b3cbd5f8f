#include "support/npy.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {

namespace {

struct NpyCode {
  DType dt;
  const char* code;
};
constexpr NpyCode kCodes[] = {
    {DType::Float32, "<f4"}, {DType::Float64, "<f8"}, {DType::Float16, "<f2"}, {DType::Int8, "|i1"},
    {DType::Int16, "<i2"},   {DType::Int32, "<i4"},   {DType::Int64, "<i8"},   {DType::UInt8, "|u1"},
    {DType::UInt16, "<u2"},  {DType::UInt32, "<u4"},  {DType::UInt64, "<u8"},  {DType::Bool, "|b1"},
};

// Value of `key` in the header dict, e.g. 'descr': '<f4' → "'<f4'".
std::string dict_value(const std::string& h, const std::string& key, const std::string& path) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) user_error(path, ": .npy header has no '", key, "'");
  size_t colon = h.find(':', k);
  size_t start = h.find_first_not_of(' ', colon + 1);
  size_t end = start;
  if (h[start] == '(') end = h.find(')', start) + 1;
  else end = h.find_first_of(",}", start);
  if (colon == std::string::npos || start == std::string::npos || end == std::string::npos)
    user_error(path, ": malformed .npy header");
  return h.substr(start, end - start);
}

}  // namespace

Tensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) user_error(path, ": cannot open file");
  char magic[8];
  if (!f.read(magic, 8) || std::string(magic, 6) != "\x93NUMPY") user_error(path, ": not a .npy file");
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) user_error(path, ": truncated .npy header");
    hlen = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) user_error(path, ": truncated .npy header");
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  }
  if (hlen > (1u << 20)) user_error(path, ": .npy header is too large");
  std::string h(hlen, '\0');
  if (!f.read(h.data(), hlen)) user_error(path, ": truncated .npy header");
  std::string descr = dict_value(h, "descr", path);
  std::string fortran = dict_value(h, "fortran_order", path);
  std::string shape_s = dict_value(h, "shape", path);
  if (fortran != "False") user_error(path, ": Fortran-order .npy arrays are not supported");
  if (descr.size() < 3) user_error(path, ": malformed dtype ", descr);
  std::string code = descr.substr(1, descr.size() - 2);
  if (code.size() == 3 && code[0] == '=') code[0] = '<';
  if (code == "<b1" || code == "<i1" || code == "<u1") code[0] = '|';
  DType dt = DType::Undefined;
  for (const auto& c : kCodes)
    if (code == c.code) dt = c.dt;
  if (dt == DType::Undefined) user_error(path, ": unsupported .npy dtype ", descr);
  Shape shape;
  std::string dims = shape_s.substr(1, shape_s.size() - 2);
  std::stringstream ss(dims);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(' ');
    if (a == std::string::npos) continue;
    try {
      shape.push_back(std::stoll(item.substr(a)));
    } catch (const std::exception&) {
      user_error(path, ": malformed shape ", shape_s);
    }
  }
  Tensor t(dt, shape);
  if (t.nbytes() && !f.read(static_cast<char*>(t.raw()), std::streamsize(t.nbytes())))
    user_error(path, ": truncated .npy data (", TensorType{dt, shape}.str(), " needs ", t.nbytes(), " bytes)");
  return t;
}

std::string encode_npy(const Tensor& t) {
  const char* code = nullptr;
  for (const auto& c : kCodes)
    if (c.dt == t.dtype()) code = c.code;
  if (!code) user_error("dtype ", dtype_name(t.dtype()), " cannot be written as .npy");
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + (t.shape().size() == 1 ? "," : i + 1 < t.shape().size() ? ", " : "");
  shape += ")";
  std::string h = std::string("{'descr': '") + code + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(h.size() & 0xff);
  out += char((h.size() >> 8) & 0xff);
  out += h;
  out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

void write_npy(const std::string& path, const Tensor& t) {
  std::string bytes = encode_npy(t);
  std::string tmp = path + ".kiln-tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) user_error(path, ": cannot write file");
    f.write(bytes.data(), std::streamsize(bytes.size()));
    if (!f) {
      std::remove(tmp.c_str());
      user_error(path, ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    user_error(path, ": cannot write file (", ec.message(), ")");
  }
}

}  // namespace kiln
