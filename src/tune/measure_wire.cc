#include "tune/measure_wire.h"

#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "support/error.h"

namespace kiln::tune {

namespace fs = std::filesystem;

// Tensor bytes are written as they lie in memory; every machine kiln targets is little-endian, and
// the integers around them are written little-endian explicitly to match.
static_assert(std::endian::native == std::endian::little, "measure_wire assumes a little-endian host");

namespace {

// Requests are version 2: version 1 carried one source; 2 carries a list (MeasureRequest::sources).
constexpr std::string_view kRequestMagic("KILNMRQ\x02", 8);
constexpr std::string_view kResultMagic("KILNMRS\x01", 8);
constexpr size_t kChecksumBytes = 8;

uint64_t fnv1a(std::string_view b) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : b) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

class Writer {
 public:
  explicit Writer(std::string_view magic) : out_(magic) {}
  void u8(uint8_t v) { out_.push_back(char(v)); }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(char((v >> (8 * i)) & 0xff));
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(char((v >> (8 * i)) & 0xff));
  }
  void i32(int32_t v) { u32(uint32_t(v)); }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  void str(std::string_view s) {
    u64(s.size());
    out_.append(s);
  }
  void strs(const std::vector<std::string>& v) {
    u64(v.size());
    for (const auto& s : v) str(s);
  }
  void tensor(const Tensor& t) {
    u8(uint8_t(t.dtype()));
    u32(uint32_t(t.shape().size()));
    for (int64_t d : t.shape()) i64(d);
    const size_t n = t.defined() ? t.nbytes() : 0;
    u64(n);
    if (n) out_.append(static_cast<const char*>(t.raw()), n);
  }
  std::string finish() {
    const uint64_t h = fnv1a(out_);
    u64(h);
    return std::move(out_);
  }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view bytes, std::string_view magic, const std::string& what, const char* kind)
      : what_(what), kind_(kind) {
    if (bytes.size() < magic.size() + kChecksumBytes) fail("too short");
    if (bytes.substr(0, magic.size() - 1) != magic.substr(0, magic.size() - 1)) fail("no kiln header");
    if (bytes[magic.size() - 1] != magic.back())
      fail(cat("format version ", int(uint8_t(bytes[magic.size() - 1])), ", this kiln reads version ",
               int(uint8_t(magic.back()))));
    const std::string_view body = bytes.substr(0, bytes.size() - kChecksumBytes);
    b_ = bytes.substr(body.size());  // the checksum, read with the same code as the body
    pos_ = 0;
    if (u64() != fnv1a(body)) fail("checksum mismatch: truncated or corrupted");
    b_ = body;
    pos_ = magic.size();
  }
  [[noreturn]] void fail(const std::string& why) const {
    user_error(what_, ": not a valid kiln measurement ", kind_, " (", why, ")");
  }
  size_t left() const { return b_.size() - pos_; }
  void need(size_t n) const {
    if (n > left()) fail(cat("ends early at byte ", pos_));
  }
  uint8_t u8() {
    need(1);
    return uint8_t(b_[pos_++]);
  }
  uint64_t u64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(b_[pos_ + size_t(i)])) << (8 * i);
    pos_ += 8;
    return v;
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(b_[pos_ + size_t(i)])) << (8 * i);
    pos_ += 4;
    return v;
  }
  int32_t i32() { return int32_t(u32()); }
  int64_t i64() { return int64_t(u64()); }
  double f64() { return std::bit_cast<double>(u64()); }
  // A count of elements that take at least `min_bytes` each: never more than the bytes left allow,
  // so a corrupted count cannot make the reader allocate gigabytes.
  size_t count(size_t min_bytes) {
    const uint64_t n = u64();
    if (n > left() / std::max<size_t>(1, min_bytes)) fail(cat("a count of ", n, " at byte ", pos_ - 8, " exceeds the file"));
    return size_t(n);
  }
  std::string str() {
    const size_t n = count(1);
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::vector<std::string> strs() {
    std::vector<std::string> v(count(8));
    for (auto& s : v) s = str();
    return v;
  }
  Tensor tensor() {
    const size_t at = pos_;
    const uint8_t code = u8();
    if (code > uint8_t(DType::Bool)) fail(cat("unknown dtype code ", int(code), " at byte ", at));
    const DType dt = DType(code);
    const uint32_t rank = u32();
    if (rank > left() / 8) fail(cat("a rank of ", rank, " at byte ", at, " exceeds the file"));
    Shape shape(rank);
    for (auto& d : shape) d = i64();
    const uint64_t nbytes = u64();
    if (dt == DType::Undefined) {
      if (rank || nbytes) fail(cat("an undefined tensor with data at byte ", at));
      return Tensor();
    }
    int64_t numel = 0;
    try {
      numel = shape_numel(shape);
    } catch (const UserError&) {
      fail(cat("invalid shape ", shape_str(shape), " at byte ", at));
    }
    if (uint64_t(numel) > left() / dtype_size(dt) || uint64_t(numel) * dtype_size(dt) != nbytes)
      fail(cat("tensor ", dtype_name(dt), shape_str(shape), " at byte ", at, " declares ", nbytes, " bytes"));
    need(nbytes);
    Tensor t(dt, shape);
    if (nbytes) std::memcpy(t.raw(), b_.data() + pos_, nbytes);
    pos_ += nbytes;
    return t;
  }
  void end() const {
    if (left()) fail(cat(left(), " bytes left over after the last field"));
  }

 private:
  std::string_view b_;
  size_t pos_ = 0;
  const std::string& what_;
  const char* kind_;
};

// Tensors equal in dtype, shape and bytes share one table entry.
class TensorTable {
 public:
  uint64_t add(const Tensor& t) {
    const char* p = t.defined() && t.nbytes() ? static_cast<const char*>(t.raw()) : "";
    std::string key = cat(int(t.dtype()), shape_str(t.shape()));
    const uint64_t h = fnv1a(key) ^ fnv1a(std::string_view(p, t.defined() ? t.nbytes() : 0));
    auto& ids = by_hash_[h];
    for (uint64_t id : ids)
      if (tensors_[id].dtype() == t.dtype() && (!t.defined() || tensors_[id].bitwise_equal(t))) return id;
    ids.push_back(tensors_.size());
    tensors_.push_back(t);
    return tensors_.size() - 1;
  }
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> by_hash_;
};

}  // namespace

std::string serialize_request(const MeasureRequest& req) {
  KILN_CHECK(req.kernels.size() == req.arguments.size(), "serialize_request: ", req.kernels.size(), " kernels but ",
             req.arguments.size(), " argument lists");
  TensorTable table;
  std::vector<std::vector<uint64_t>> args;
  for (const auto& list : req.arguments) {
    args.emplace_back();
    for (const Tensor& t : list) args.back().push_back(table.add(t));
  }
  std::vector<uint64_t> ref;
  for (const Tensor& t : req.reference) ref.push_back(table.add(t));

  Writer w(kRequestMagic);
  w.u64(table.tensors().size());
  for (const Tensor& t : table.tensors()) w.tensor(t);
  w.strs(req.sources);
  w.strs(req.kernels);
  w.u64(args.size());
  for (const auto& list : args) {
    w.u64(list.size());
    for (uint64_t i : list) w.u64(i);
  }
  w.u64(ref.size());
  for (uint64_t i : ref) w.u64(i);
  w.f64(req.tolerance);
  w.i32(req.threads);
  w.str(req.compile.compiler);
  w.strs(req.compile.flags);
  w.i32(req.protocol.warmup);
  w.i32(req.protocol.samples);
  w.f64(req.protocol.min_sample_ms);
  w.i32(req.protocol.max_calls_per_sample);
  return w.finish();
}

MeasureRequest parse_request(std::string_view bytes, const std::string& what) {
  Reader r(bytes, kRequestMagic, what, "request");
  // A tensor entry is at least 1 + 4 + 8 bytes (dtype, rank, byte count).
  std::vector<Tensor> table(r.count(13));
  for (Tensor& t : table) t = r.tensor();
  auto tensor_at = [&](uint64_t i) -> const Tensor& {
    if (i >= table.size()) r.fail(cat("tensor index ", i, " of a table of ", table.size()));
    return table[size_t(i)];
  };
  MeasureRequest req;
  req.sources = r.strs();
  req.kernels = r.strs();
  req.arguments.resize(r.count(8));
  for (auto& list : req.arguments) {
    list.resize(r.count(8));
    for (Tensor& t : list) t = tensor_at(r.u64());
  }
  req.reference.resize(r.count(8));
  for (Tensor& t : req.reference) t = tensor_at(r.u64());
  if (req.arguments.size() != req.kernels.size())
    r.fail(cat(req.kernels.size(), " kernels but ", req.arguments.size(), " argument lists"));
  req.tolerance = r.f64();
  req.threads = r.i32();
  req.compile.compiler = r.str();
  req.compile.flags = r.strs();
  req.protocol.warmup = r.i32();
  req.protocol.samples = r.i32();
  req.protocol.min_sample_ms = r.f64();
  req.protocol.max_calls_per_sample = r.i32();
  r.end();
  if (req.compile.compiler.empty()) r.fail("no compiler named");
  if (req.threads < 0 || req.threads > 4096) r.fail(cat("threads ", req.threads));
  if (req.protocol.samples < 0 || req.protocol.samples > 1000 || req.protocol.warmup < 0 || req.protocol.warmup > 1000 ||
      req.protocol.max_calls_per_sample < 0 || !(req.protocol.min_sample_ms >= 0 && req.protocol.min_sample_ms < 1e4))
    r.fail("timing protocol out of range");
  return req;
}

std::string serialize_result(const MeasureResult& res) {
  Writer w(kResultMagic);
  w.u64(res.candidates.size());
  for (const Measurement& m : res.candidates) {
    w.u8(m.ok ? 1 : 0);
    w.str(m.error);
    w.f64(m.median_ms);
    w.f64(m.max_rel_diff);
    w.u64(m.samples.size());
    for (double s : m.samples) w.f64(s);
  }
  w.f64(res.compile_s);
  w.f64(res.run_s);
  w.str(res.machine);
  return w.finish();
}

MeasureResult parse_result(std::string_view bytes, const std::string& what) {
  Reader r(bytes, kResultMagic, what, "result");
  MeasureResult res;
  // A candidate is at least 1 + 8 + 8 + 8 + 8 bytes.
  res.candidates.resize(r.count(33));
  for (Measurement& m : res.candidates) {
    const uint8_t ok = r.u8();
    if (ok > 1) r.fail(cat("ok flag ", int(ok)));
    m.ok = ok == 1;
    m.error = r.str();
    m.median_ms = r.f64();
    m.max_rel_diff = r.f64();
    m.samples.resize(r.count(8));
    for (double& s : m.samples) s = r.f64();
  }
  res.compile_s = r.f64();
  res.run_s = r.f64();
  res.machine = r.str();
  r.end();
  return res;
}

std::string read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) user_error(path, ": is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error(path, ": cannot open (", std::strerror(errno), ")");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) user_error(path, ": read error");
  return bytes;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      user_error(path, ": cannot write");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    user_error(path, ": cannot write (", ec.message(), ")");
  }
}

}  // namespace kiln::tune
