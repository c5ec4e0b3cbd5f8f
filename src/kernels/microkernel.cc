#include "kernels/microkernel.h"

#include <sstream>

namespace kiln::kernels {

void microkernel_f32(int64_t mr, int64_t nr, int64_t kc, const float* a, int64_t as_i, int64_t as_k, const float* b,
                     int64_t bs_k, float* c, int64_t ldc) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      float s = c[i * ldc + j];
      for (int64_t k = 0; k < kc; ++k) {
        const float p = a[i * as_i + k * as_k] * b[k * bs_k + j];
        s = s + p;
      }
      c[i * ldc + j] = s;
    }
}

bool has_specialisation(int64_t mr, int64_t nr) { return mr >= 1 && mr <= 16 && nr >= 4 && nr <= 64 && nr % 4 == 0; }

std::string specialisation_name(int64_t mr, int64_t nr) {
  return std::string(kMicroKernelF32) + "_" + std::to_string(mr) + "x" + std::to_string(nr);
}

namespace {

// The widest vector (in floats) that divides nr: one accumulator register per `width` columns.
int64_t vector_width(int64_t nr) {
  for (int64_t w : {16, 8, 4})
    if (nr % w == 0) return w;
  return 1;
}

}  // namespace

std::string microkernel_c_source(const std::set<std::pair<int64_t, int64_t>>& tiles) {
  std::ostringstream os;
  os << "/* Contraction micro-kernels (src/kernels/microkernel.h): c[i*ldc+j] += sum_k a[i*as_i+k*as_k] *\n"
        " * b[k*bs_k+j], k ascending, one accumulator per element (bit-identical to the reference). */\n";
  // Generic: any tile. i, then k, then j innermost (contiguous in b and c: vectorisable); each
  // element still sums its products in ascending k.
  os << "static void kiln_mk_f32(int64_t mr, int64_t nr, int64_t kc, const float* restrict a, int64_t as_i,\n"
        "    int64_t as_k, const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc) {\n"
        "  for (int64_t i = 0; i < mr; ++i)\n"
        "    for (int64_t k = 0; k < kc; ++k) {\n"
        "      const float aik = a[i * as_i + k * as_k];\n"
        "      const float* restrict bk = b + k * bs_k;\n"
        "      float* restrict ci = c + i * ldc;\n"
        "      for (int64_t j = 0; j < nr; ++j) ci[j] = ci[j] + aik * bk[j];\n"
        "    }\n"
        "}\n";
  std::set<int64_t> widths;
  for (auto [mr, nr] : tiles)
    if (has_specialisation(mr, nr)) widths.insert(vector_width(nr));
  for (int64_t w : widths)
    os << "typedef float kiln_vf" << w << " __attribute__((vector_size(" << 4 * w << "), aligned(4)));\n";
  for (auto [mr, nr] : tiles) {
    if (!has_specialisation(mr, nr)) continue;
    const int64_t w = vector_width(nr), nv = nr / w;
    const std::string v = "kiln_vf" + std::to_string(w);
    // The mr × nv accumulator vectors stay in registers across the k loop (constant trip counts
    // let the compiler unroll the i and v loops completely).
    os << "static void " << specialisation_name(mr, nr)
       << "(int64_t kc, const float* restrict a, int64_t as_i, int64_t as_k,\n"
          "    const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc) {\n"
       << "  " << v << " acc[" << mr << "][" << nv << "];\n"
       << "  for (int i = 0; i < " << mr << "; ++i)\n"
       << "    for (int v = 0; v < " << nv << "; ++v) memcpy(&acc[i][v], c + i * ldc + v * " << w << ", sizeof(" << v
       << "));\n"
       << "  for (int64_t k = 0; k < kc; ++k) {\n"
       << "    " << v << " bv[" << nv << "];\n"
       << "    for (int v = 0; v < " << nv << "; ++v) memcpy(&bv[v], b + k * bs_k + v * " << w << ", sizeof(" << v
       << "));\n"
       << "    for (int i = 0; i < " << mr << "; ++i) {\n"
       << "      const float aik = a[i * as_i + k * as_k];\n"
       << "      for (int v = 0; v < " << nv << "; ++v) acc[i][v] = acc[i][v] + aik * bv[v];\n"
       << "    }\n"
       << "  }\n"
       << "  for (int i = 0; i < " << mr << "; ++i)\n"
       << "    for (int v = 0; v < " << nv << "; ++v) memcpy(c + i * ldc + v * " << w << ", &acc[i][v], sizeof(" << v
       << "));\n"
       << "}\n";
  }
  return os.str() + "\n";
}

}  // namespace kiln::kernels
