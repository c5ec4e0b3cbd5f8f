// The micro-kernel specialisations (src/kernels/microkernel.cc), compiled by the JIT in both
// numerics modes, against the interface's reference semantics (kernels::microkernel_f32): every
// tile shape kind — nr a multiple of 16, of 8, of 4, and widths no vector divides (a 7x7 conv's
// 49-column rows: the AVX-512 kernel masks its last vector) — with strided A, a B row stride wider
// than the tile and an accumulator row stride wider than nr whose extra columns must stay as they
// were, adding to the tile (acc = 1) or overwriting it (acc = 0: the tile's old values, garbage
// here, must not leak in); the generic loop; and the segmented form (A at a per-segment offset,
// no segments at all too). Strict mode must match bit for bit;
// the default within the FMA contract. The transposing copy of the implicit conv's epilogue too.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>

#include <unistd.h>

#include "kernels/microkernel.h"
#include "runtime/executable.h"
#include "runtime/jit.h"

namespace kiln {
namespace {

const std::vector<std::pair<int64_t, int64_t>> kTiles = {{8, 32}, {3, 48}, {8, 24}, {5, 20}, {8, 17}, {2, 1}, {7, 49}, {16, 63}, {1, 5}};

std::string wrapper_source(bool fma) {
  std::set<std::pair<int64_t, int64_t>> tiles(kTiles.begin(), kTiles.end());
  std::ostringstream os;
  os << "#include <stdint.h>\n#include <string.h>\n" << kernels::microkernel_c_source(tiles, fma);
  // One entry point per tile with the kernel ABI: args = {kc, a, as_i, as_k, b, bs_k, c, ldc, acc}.
  for (auto [mr, nr] : kTiles) {
    os << "void run_" << mr << "x" << nr << "(void* const* args) {\n"
       << "  " << kernels::specialisation_name(mr, nr)
       << "(*(const int64_t*)args[0], (const float*)args[1], *(const int64_t*)args[2], *(const int64_t*)args[3],\n"
          "      (const float*)args[4], *(const int64_t*)args[5], (float*)args[6], *(const int64_t*)args[7],\n"
          "      *(const int64_t*)args[8]);\n"
          "}\n";
    // The segmented form: args = {nseg, kc, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc}.
    os << "void seg_" << mr << "x" << nr << "(void* const* args) {\n"
       << "  " << kernels::specialisation_name(mr, nr, true)
       << "(*(const int64_t*)args[0], *(const int64_t*)args[1], (const float*)args[2], (const int64_t*)args[3],\n"
          "      *(const int64_t*)args[4], *(const int64_t*)args[5], (const float*)args[6], *(const int64_t*)args[7],\n"
          "      (float*)args[8], *(const int64_t*)args[9], *(const int64_t*)args[10]);\n"
          "}\n";
  }
  // The generic loop (any tile): args = {mr, nr, kc, a, as_i, as_k, b, bs_k, c, ldc, acc}.
  os << "void run_generic(void* const* args) {\n"
        "  kiln_mk_f32(*(const int64_t*)args[0], *(const int64_t*)args[1], *(const int64_t*)args[2], (const float*)args[3],\n"
        "      *(const int64_t*)args[4], *(const int64_t*)args[5], (const float*)args[6], *(const int64_t*)args[7],\n"
        "      (float*)args[8], *(const int64_t*)args[9], *(const int64_t*)args[10]);\n"
        "}\n";
  return os.str();
}

// The accumulator rows against the interface's: bit for bit in strict mode and outside the tile
// (columns past nr must stay as they were), else within a few ulps of the sum of |terms| (terms
// products of |a·b| <= 1).
void expect_tile(const std::vector<float>& got, const std::vector<float>& want, int64_t mr, int64_t nr, int64_t ldc,
                 bool strict, int64_t terms) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = size_t(i * ldc + j);
      if (j >= nr || strict) {  // bits: a NaN outside the tile must stay that NaN
        ASSERT_EQ(std::bit_cast<uint32_t>(got[at]), std::bit_cast<uint32_t>(want[at]))
            << "row " << i << " column " << j << ": " << got[at] << " vs " << want[at] << (j >= nr ? " (outside the tile)" : "");
      } else {
        ASSERT_NEAR(got[at], want[at], 1e-5 * double(terms)) << "row " << i << " column " << j;
      }
    }
}

void check_mode(bool strict) {
  SCOPED_TRACE(strict ? "strict" : "fma");
  for (auto [mr, nr] : kTiles) ASSERT_TRUE(kernels::has_specialisation(mr, nr)) << mr << "x" << nr;
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_mk_test_" + std::to_string(::getpid()));
  runtime::BuildOptions o;
  o.strict_fp = strict;
  o.compile.cache_dir = dir.string();
  o = runtime::with_numerics(o);
  auto module = runtime::JitModule::build(wrapper_source(!strict), o.compile);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t acc : {1, 0})
    for (auto [mr, nr] : kTiles) {
      SCOPED_TRACE(std::to_string(mr) + "x" + std::to_string(nr) + (acc ? " adding" : " overwriting"));
      const int64_t kc = 37, as_i = kc + 3, as_k = 1, bs_k = nr + 7, ldc = nr + 5;
      std::vector<float> a(size_t(mr * as_i)), b(size_t(kc * bs_k)), c(size_t(mr * ldc));
      for (auto* v : {&a, &b, &c})
        for (float& x : *v) x = u(rng);
      if (!acc)
        for (size_t i = 0; i < c.size(); i += 3) c[i] = std::nanf("");  // must not leak into the sums
      std::vector<float> want = c, got = c, generic = c;
      kernels::microkernel_f32(mr, nr, kc, a.data(), as_i, as_k, b.data(), bs_k, want.data(), ldc, acc != 0);
      int64_t mr_v = mr, nr_v = nr, kc_v = kc, as_i_v = as_i, as_k_v = as_k, bs_k_v = bs_k, ldc_v = ldc, acc_v = acc;
      void* args[] = {&kc_v, a.data(), &as_i_v, &as_k_v, b.data(), &bs_k_v, got.data(), &ldc_v, &acc_v};
      module->get("run_" + std::to_string(mr) + "x" + std::to_string(nr))(args);
      expect_tile(got, want, mr, nr, ldc, strict, kc);
      void* gargs[] = {&mr_v, &nr_v, &kc_v, a.data(), &as_i_v, &as_k_v, b.data(), &bs_k_v, generic.data(), &ldc_v, &acc_v};
      module->get("run_generic")(gargs);
      expect_tile(generic, want, mr, nr, ldc, strict, kc);
    }
  // Segmented: 3 segments of kc terms, each reading A at its own offset (out of order, as a
  // conv's kernel positions do), B's rows one after another.
  for (int64_t nseg : {3, 0})
    for (int64_t acc : {1, 0})
      for (auto [mr, nr] : kTiles) {
        SCOPED_TRACE("segmented " + std::to_string(mr) + "x" + std::to_string(nr) + ", " + std::to_string(nseg) +
                     " segments" + (acc ? ", adding" : ", overwriting"));
        const int64_t kc = 13, as_i = 2, as_k = 29, bs_k = nr + 3, ldc = nr + 2;
        const std::vector<int64_t> aoff = {400, 7, 211};
        std::vector<float> a(size_t(400 + (mr - 1) * as_i + (kc - 1) * as_k + 1)), b(size_t(3 * kc * bs_k)), c(size_t(mr * ldc));
        for (auto* v : {&a, &b, &c})
          for (float& x : *v) x = u(rng);
        std::vector<float> want = c, got = c;
        kernels::microkernel_seg_f32(mr, nr, nseg, kc, a.data(), aoff.data(), as_i, as_k, b.data(), bs_k, want.data(), ldc,
                                     acc != 0);
        int64_t ns_v = nseg, kc_v = kc, as_i_v = as_i, as_k_v = as_k, bs_k_v = bs_k, ldc_v = ldc, acc_v = acc;
        void* args[] = {&ns_v, &kc_v, a.data(), const_cast<int64_t*>(aoff.data()), &as_i_v, &as_k_v, b.data(), &bs_k_v,
                        got.data(), &ldc_v, &acc_v};
        module->get("seg_" + std::to_string(mr) + "x" + std::to_string(nr))(args);
        expect_tile(got, want, mr, nr, ldc, strict, nseg * kc);
      }
  module.reset();
  std::filesystem::remove_all(dir);
}

TEST(MicroKernel, SpecialisationsMatchTheInterface) {
  check_mode(false);
  check_mode(true);
}

// The epilogue forms (kiln_mk_f32_ep, kiln_mk_f32_seg_ep), every specialisation and the generic
// loops, built for each ISA the preprocessor picks from (AVX-512 registers, AVX2 registers, the
// portable kernels with the epilogue over the tile) and in strict numerics, against the
// interface's semantics (microkernel_f32 or microkernel_seg_f32, then microkernel_epilogue_f32):
// every flag combination; with no products (kc = 0, the tile's own values go through the
// epilogue) bit for bit in every build, over NaN, ±0, ±inf and values equal to the bounds, with
// NaN and ±0 bounds and a NaN bias (max/min must return the sum where the reference's selects do);
// with products within the FMA contract (strict builds: bit for bit, special sums too). Bias past nbias is never
// read (NaN there) and columns past nr stay as they were.
std::string epilogue_wrapper_source(bool fma) {
  std::set<std::pair<int64_t, int64_t>> tiles(kTiles.begin(), kTiles.end());
  std::ostringstream os;
  os << "#include <stdint.h>\n#include <string.h>\n" << kernels::microkernel_c_source(tiles, fma, tiles);
  // args = {mr, nr, nseg, kc, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc, ep, bias, nbias, lo, hi, res, ldr}; nseg < 0:
  // plain form.
  auto call = [&](const std::string& fn, bool seg, bool generic) {
    std::string r = "  " + fn + "(";
    if (generic) r += "*(const int64_t*)args[0], *(const int64_t*)args[1], ";
    if (seg) r += "*(const int64_t*)args[2], ";
    r += "*(const int64_t*)args[3], (const float*)args[4], ";
    if (seg) r += "(const int64_t*)args[5], ";
    r += "*(const int64_t*)args[6], *(const int64_t*)args[7], (const float*)args[8], *(const int64_t*)args[9],\n"
         "      (float*)args[10], *(const int64_t*)args[11], *(const int64_t*)args[12], *(const int64_t*)args[13],\n"
         "      (const float*)args[14], *(const int64_t*)args[15], *(const float*)args[16], *(const float*)args[17],\n"
         "      (const float*)args[18], *(const int64_t*)args[19]);\n";
    return r;
  };
  for (auto [mr, nr] : kTiles) {
    const std::string t = std::to_string(mr) + "x" + std::to_string(nr);
    os << "void ep_" << t << "(void* const* args) {\n  if (*(const int64_t*)args[2] < 0)\n"
       << call(kernels::specialisation_name(mr, nr, false, true), false, false) << "  else\n"
       << call(kernels::specialisation_name(mr, nr, true, true), true, false) << "}\n";
  }
  os << "void ep_generic(void* const* args) {\n  if (*(const int64_t*)args[2] < 0)\n"
     << call("kiln_mk_f32_ep", false, true) << "  else\n" << call("kiln_mk_f32_seg_ep", true, true) << "}\n";
  return os.str();
}

void check_epilogue(const std::string& march, bool strict) {
  SCOPED_TRACE(march + (strict ? " strict" : " fma"));
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_mk_ep_test_" + std::to_string(::getpid()));
  runtime::BuildOptions o;
  o.strict_fp = strict;
  o.compile.cache_dir = dir.string();
  o = runtime::with_numerics(o);
  for (auto& f : o.compile.flags)
    if (f.rfind("-march=", 0) == 0) f = march;
  auto module = runtime::JitModule::build(epilogue_wrapper_source(!strict), o.compile);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<float> special = {nan, -0.0f, 0.0f, 0.5f, -0.5f, 6.0f, -inf, inf, 7.0f, -3.0f};
  const std::vector<std::pair<float, float>> bounds = {{0.0f, 6.0f}, {-0.0f, 0.5f}, {nan, nan}, {-0.5f, -0.5f}};
  for (int64_t nseg : {-1, 3})
    for (int64_t kc : {0, 9})
      for (int64_t ep = 0; ep <= 15; ++ep)
        for (size_t bi = 0; bi < bounds.size(); ++bi)
          for (auto [mr, nr] : kTiles) {
            const bool generic = (ep + int64_t(bi)) % 3 == 0;  // the generic loops on a third of the cases
            SCOPED_TRACE(std::to_string(mr) + "x" + std::to_string(nr) + (nseg < 0 ? " plain" : " segmented") + ", kc " +
                         std::to_string(kc) + ", ep " + std::to_string(ep) + ", bounds " + std::to_string(bi) +
                         (generic ? ", generic" : ""));
            const int64_t as_i = 2, as_k = 29, bs_k = nr + 3, ldc = nr + 2, nbias = std::max<int64_t>(1, nr - 2), ldr = nr + 5;
            const std::vector<int64_t> aoff = {300, 7, 111};
            std::vector<float> a(size_t(300 + (mr - 1) * as_i + std::max<int64_t>(kc - 1, 0) * as_k + 1)),
                b(size_t(3 * std::max<int64_t>(kc, 1) * bs_k)), c(size_t(mr * ldc)), bv(static_cast<size_t>(nr)),
                res(size_t((mr - 1) * ldr + nr));  // the residual's last row ends at its last column
            for (auto* v : {&a, &b, &c, &bv, &res})
              for (float& x : *v) x = u(rng);
            // Special sums where they are compared bit for bit (no products; strict builds).
            if (kc == 0 || strict)
              for (size_t i = 0; i < c.size(); ++i)
                if (i % 2 == 0) c[i] = special[(i / 2) % special.size()];
            if (kc == 0 || strict) {
              bv[0] = nan;
              if (nr > 2) bv[1] = -0.0f;
              for (size_t i = 0; i < res.size(); i += 3) res[i] = special[(i / 3 + 4) % special.size()];
            }
            for (int64_t j = nbias; j < nr; ++j) bv[size_t(j)] = nan;  // never read
            auto [lo, hi] = bounds[bi];
            std::vector<float> want = c, got = c;
            if (nseg < 0)
              kernels::microkernel_f32(mr, nr, kc, a.data() + 300, as_i, as_k, b.data(), bs_k, want.data(), ldc, true);
            else
              kernels::microkernel_seg_f32(mr, nr, nseg, kc, a.data(), aoff.data(), as_i, as_k, b.data(), bs_k, want.data(),
                                           ldc, true);
            kernels::microkernel_epilogue_f32(mr, nr, want.data(), ldc, ep, bv.data(), nbias, lo, hi, res.data(), ldr);
            int64_t mr_v = mr, nr_v = nr, ns_v = nseg, kc_v = kc, as_i_v = as_i, as_k_v = as_k, bs_k_v = bs_k, ldc_v = ldc,
                    acc_v = 1, ep_v = ep, nb_v = nbias, ldr_v = ldr;
            float lo_v = lo, hi_v = hi;
            void* args[] = {&mr_v, &nr_v, &ns_v, &kc_v, nseg < 0 ? a.data() + 300 : a.data(), const_cast<int64_t*>(aoff.data()),
                            &as_i_v, &as_k_v, b.data(), &bs_k_v, got.data(), &ldc_v, &acc_v, &ep_v, bv.data(), &nb_v,
                            &lo_v, &hi_v, res.data(), &ldr_v};
            module->get(generic ? "ep_generic" : "ep_" + std::to_string(mr) + "x" + std::to_string(nr))(args);
            expect_tile(got, want, mr, nr, ldc, strict || kc == 0, 3 * kc + 2);
          }
  module.reset();
  std::filesystem::remove_all(dir);
}

TEST(MicroKernel, EpilogueFormsMatchTheInterface) {
  check_epilogue("-march=x86-64", false);   // the portable kernels, the epilogue over the tile
  check_epilogue("-march=haswell", false);  // AVX2 registers
  if (__builtin_cpu_supports("avx512f")) check_epilogue("-march=skylake-avx512", false);
  check_epilogue("-march=native", true);    // strict: the portable kernels, bit for bit
}

// The transposing copy (kernels::transpose_c_source), compiled by the JIT, against its semantics
// (kernels::transpose_f32): edges of every kind (fewer than 16, exactly 16 and more, in rows and
// in columns), strides wider than the copy, and the destination's elements outside the copy left
// as they were; a pure copy, so bit for bit.
TEST(MicroKernel, TransposingCopyMatchesItsSemantics) {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_tr_test_" + std::to_string(::getpid()));
  runtime::BuildOptions o;
  o.compile.cache_dir = dir.string();
  o = runtime::with_numerics(o);
  const std::string src = "#include <stdint.h>\n" + kernels::transpose_c_source() +
                          "void run(void* const* a) {\n"
                          "  kiln_transpose_f32((float*)a[0], *(const int64_t*)a[1], (const float*)a[2], *(const int64_t*)a[3],\n"
                          "      *(const int64_t*)a[4], *(const int64_t*)a[5]);\n"
                          "}\n";
  auto module = runtime::JitModule::build(src, o.compile);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t rows : {1, 7, 16, 17, 45})
    for (int64_t cols : {1, 5, 16, 32, 33}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
      const int64_t lds = cols + 3, ldd = rows + 11;
      std::vector<float> in(size_t(rows * lds)), want(size_t(cols * ldd));
      for (float& x : in) x = u(rng);
      for (float& x : want) x = u(rng);
      std::vector<float> got = want;
      kernels::transpose_f32(want.data(), ldd, in.data(), lds, rows, cols);
      int64_t ldd_v = ldd, lds_v = lds, rows_v = rows, cols_v = cols;
      void* args[] = {got.data(), &ldd_v, in.data(), &lds_v, &rows_v, &cols_v};
      module->get("run")(args);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
    }
  module.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
