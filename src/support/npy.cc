#include "support/npy.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
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

// Value of `key` in the header dict, e.g. 'descr': '<f4' → "'<f4'", 'shape': (2, 3) → "(2, 3)".
// Every index is checked against the header's size: the header is untrusted input (numpy writes
// "{'descr': '<f4', ...}", other writers space it differently or not at all).
std::string dict_value(const std::string& h, const std::string& key, const std::string& path) {
  auto malformed = [&]() -> std::string { user_error(path, ": malformed .npy header (at '", key, "')"); };
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) k = h.find("\"" + key + "\"");
  if (k == std::string::npos) user_error(path, ": .npy header has no '", key, "'");
  size_t i = k + key.size() + 2;
  auto skip_spaces = [&] {
    while (i < h.size() && (h[i] == ' ' || h[i] == '\t')) ++i;
  };
  skip_spaces();
  if (i >= h.size() || h[i] != ':') malformed();
  ++i;
  skip_spaces();
  if (i >= h.size()) malformed();
  size_t end;
  if (h[i] == '(') {
    end = h.find(')', i);
    if (end == std::string::npos) malformed();
    ++end;
  } else if (h[i] == '\'' || h[i] == '"') {
    end = h.find(h[i], i + 1);
    if (end == std::string::npos) malformed();
    ++end;
  } else {
    end = h.find_first_of(",}", i);
    if (end == std::string::npos) malformed();
    while (end > i && (h[end - 1] == ' ' || h[end - 1] == '\t')) --end;
  }
  if (end <= i) malformed();
  return h.substr(i, end - i);
}

// "(2, 3)", "(6,)", "()" → dims; anything else (a bare number, a negative or huge dim) is an error.
Shape parse_shape(const std::string& s, const std::string& path) {
  auto bad = [&]() -> Shape { user_error(path, ": malformed shape ", s, " in the .npy header"); };
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') bad();
  Shape shape;
  std::stringstream ss(s.substr(1, s.size() - 2));
  std::string item;
  bool last_empty = false;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) {  // "(6,)": only the last item may be empty
      if (last_empty) bad();
      last_empty = true;
      continue;
    }
    if (last_empty) bad();
    std::string d = item.substr(a, b - a + 1);
    if (d.size() > 18 || d.find_first_not_of("0123456789") != std::string::npos) bad();
    shape.push_back(std::stoll(d));
  }
  return shape;
}

}  // namespace

Tensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) user_error(path, ": cannot open file");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) user_error(path, ": not a regular file");
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) user_error(path, ": cannot read file size (", ec.message(), ")");
  char magic[8];
  if (!f.read(magic, 8) || std::string(magic, 6) != "\x93NUMPY") user_error(path, ": not a .npy file");
  uint32_t hlen = 0;
  uint64_t data_start = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) user_error(path, ": truncated .npy header");
    hlen = b[0] | (b[1] << 8);
    data_start = 10 + uint64_t(hlen);
  } else {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) user_error(path, ": truncated .npy header");
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
    data_start = 12 + uint64_t(hlen);
  }
  if (hlen > (1u << 20)) user_error(path, ": .npy header is too large");
  if (data_start > file_size) user_error(path, ": truncated .npy header");
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
  Shape shape = parse_shape(shape_s, path);
  // The declared size is checked against the bytes present before anything is allocated: a
  // 100-byte file declaring 4 GiB must not cost 4 GiB.
  int64_t numel = 0;
  try {
    numel = shape_numel(shape);
  } catch (const UserError& e) {
    user_error(path, ": ", e.what());
  }
  const uint64_t es = dtype_size(dt), have = file_size - data_start;
  if (numel > 0 && uint64_t(numel) > std::numeric_limits<uint64_t>::max() / es)
    user_error(path, ": shape ", shape_str(shape), " is too large");
  const uint64_t need = uint64_t(numel) * es;
  if (need > have)
    user_error(path, ": truncated .npy data (", TensorType{dt, shape}.str(), " needs ", need, " bytes, the file holds ",
               have, ")");
  Tensor t;
  try {
    t = Tensor(dt, shape);
  } catch (const UserError& e) {
    user_error(path, ": ", e.what());
  }
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
