// The fixed text of an ahead-of-time bundle: the driver's support functions, the runner (main.c),
// the Makefile and the README. Only the Makefile's compiler and flags and the README's model
// description vary with the model.
#include <sstream>

#include "runtime/aot_bundle.h"

namespace kiln::runtime {

// The weights are checked field by field so a wrong file says what is wrong; the hash is last
// (it reads every byte) and catches a weights.bin from another compile of the same model.
std::string aot_driver_support() {
  return R"C(static unsigned char* kiln_model_arena_ = NULL;
static unsigned char* kiln_model_weights_ = NULL;
static char kiln_model_error_[512] = "kiln_model_init has not been called";

static int kiln_model_fail_(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(kiln_model_error_, sizeof kiln_model_error_, fmt, ap);
  va_end(ap);
  return code;
}

const char* kiln_model_error(void) { return kiln_model_error_; }

void kiln_model_set_num_threads(int n) {
  if (n > 0) kiln_set_num_threads(n);
}

/* Zeroed, 64-byte aligned (the memory plan aligns every slot to 64 bytes), never NULL on success. */
static unsigned char* kiln_model_alloc_(long long bytes) {
  size_t n = (size_t)((bytes + 63) / 64 * 64);
  if (n == 0) n = 64;
  unsigned char* p = (unsigned char*)aligned_alloc(64, n);
  if (p) memset(p, 0, n);
  return p;
}

void kiln_model_free(void) {
  free(kiln_model_arena_);
  free(kiln_model_weights_);
  kiln_model_arena_ = NULL;
  kiln_model_weights_ = NULL;
}

static uint64_t kiln_model_le_(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static uint64_t kiln_model_hash_(const unsigned char* p, long long n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (long long i = 0; i + 8 <= n; i += 8) h = (h ^ kiln_model_le_(p + i, 8)) * 0x100000001b3ULL;
  return h;
}

int kiln_model_init(const char* path) {
  kiln_model_free();
  if (!path) path = "weights.bin";
  FILE* f = fopen(path, "rb");
  if (!f) return kiln_model_fail_(KILN_MODEL_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
  unsigned char h[KILN_MODEL_HEADER_BYTES];
  int rc = KILN_MODEL_OK;
  if (fread(h, 1, sizeof h, f) != sizeof h || memcmp(h, "KILNWTS1", 8) != 0) {
    rc = kiln_model_fail_(KILN_MODEL_ERR_FORMAT, "%s: not a kiln weights file", path);
  } else if (kiln_model_le_(h + 8, 4) != 1 || kiln_model_le_(h + 12, 4) != KILN_MODEL_HEADER_BYTES) {
    rc = kiln_model_fail_(KILN_MODEL_ERR_FORMAT, "%s: weights format version %u, this model reads version 1",
                          path, (unsigned)kiln_model_le_(h + 8, 4));
  } else if (kiln_model_le_(h + 16, 8) != (uint64_t)KILN_MODEL_WEIGHTS_BYTES ||
             kiln_model_le_(h + 24, 8) != KILN_MODEL_WEIGHTS_HASH) {
    rc = kiln_model_fail_(KILN_MODEL_ERR_FORMAT,
                          "%s: weights of another model (%llu bytes, hash %016llx; this model needs %lld bytes, "
                          "hash %016llx)", path, (unsigned long long)kiln_model_le_(h + 16, 8),
                          (unsigned long long)kiln_model_le_(h + 24, 8), KILN_MODEL_WEIGHTS_BYTES,
                          (unsigned long long)KILN_MODEL_WEIGHTS_HASH);
  } else if (!(kiln_model_weights_ = kiln_model_alloc_(KILN_MODEL_WEIGHTS_BYTES)) ||
             !(kiln_model_arena_ = kiln_model_alloc_(KILN_MODEL_ARENA_BYTES))) {
    rc = kiln_model_fail_(KILN_MODEL_ERR_NOMEM, "cannot allocate %lld bytes of weights and %lld bytes of arena",
                          KILN_MODEL_WEIGHTS_BYTES, KILN_MODEL_ARENA_BYTES);
  } else if (fread(kiln_model_weights_, 1, (size_t)KILN_MODEL_WEIGHTS_BYTES, f) != (size_t)KILN_MODEL_WEIGHTS_BYTES) {
    rc = kiln_model_fail_(KILN_MODEL_ERR_FORMAT, "%s: truncated (%lld bytes of data expected)", path,
                          KILN_MODEL_WEIGHTS_BYTES);
  } else if (fgetc(f) != EOF) {
    rc = kiln_model_fail_(KILN_MODEL_ERR_FORMAT, "%s: longer than the %lld bytes expected", path,
                          KILN_MODEL_HEADER_BYTES + KILN_MODEL_WEIGHTS_BYTES);
  } else if (kiln_model_hash_(kiln_model_weights_, KILN_MODEL_WEIGHTS_BYTES) != KILN_MODEL_WEIGHTS_HASH) {
    rc = kiln_model_fail_(KILN_MODEL_ERR_FORMAT, "%s: corrupt (the data does not match its hash)", path);
  }
  fclose(f);
  if (rc != KILN_MODEL_OK) {
    kiln_model_free();
    return rc;
  }
  if (KILN_MODEL_DEFAULT_THREADS > 0) kiln_set_num_threads(KILN_MODEL_DEFAULT_THREADS);
  kiln_model_error_[0] = 0;
  return KILN_MODEL_OK;
}

static int kiln_model_null_io_(const void* const* in, int n_in, void* const* out, int n_out) {
  for (int i = 0; i < n_in; ++i)
    if (!in || !in[i])
      return kiln_model_fail_(KILN_MODEL_ERR_ARGUMENT, "kiln_model_run: input %d (%s) is NULL", i,
                              kiln_model_input_info(i)->name);
  for (int i = 0; i < n_out; ++i)
    if (!out || !out[i])
      return kiln_model_fail_(KILN_MODEL_ERR_ARGUMENT, "kiln_model_run: output %d (%s) is NULL", i,
                              kiln_model_output_info(i)->name);
  return 0;
}
)C";
}

std::string aot_runner_source() {
  return R"C(/* kiln_model_run: runs the bundled model on files (see README.txt). It is the same for every
 * model: the inputs and outputs come from kiln_model_input_info / kiln_model_output_info. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kiln_model.h"

static const char* kUsage =
    "usage: kiln_model_run [-w WEIGHTS] [-o OUTDIR] [-t THREADS] [-n RUNS] INPUT...\n"
    "  INPUT    one file per model input, in order: .npy (dtype and shape must match) or raw bytes\n"
    "  -w FILE  weights file (default: weights.bin beside this program)\n"
    "  -o DIR   where OUTPUT_NAME.npy files go (default: .; created when missing)\n"
    "  -t N     threads (default: chosen at compile time, else OpenMP's)\n"
    "  -n N     run N times after one warm-up run and print the latency\n";

static void* alloc_buffer(int64_t bytes) {
  size_t n = (size_t)((bytes + 63) / 64 * 64);
  void* p = aligned_alloc(64, n ? n : 64);
  if (p) memset(p, 0, n ? n : 64);
  return p;
}

/* The value text after 'key': in a .npy header dict (NULL when absent). */
static const char* npy_field(const char* header, const char* key) {
  const char* k = strstr(header, key);
  if (!k) return NULL;
  const char* colon = strchr(k + strlen(key), ':');
  if (!colon) return NULL;
  colon++;
  while (*colon == ' ') colon++;
  return colon;
}

/* The first byte of a numpy dtype code: '=' means native (little-endian here), 1-byte types use '|'. */
static int same_descr(const char* file, const char* want) {
  if (strlen(file) != 3 || strlen(want) != 3 || strcmp(file + 1, want + 1) != 0) return 0;
  return file[0] == want[0] || file[0] == '=' || (want[0] == '|' && file[0] == '<');
}

static int check_npy_header(const char* path, const char* h, const kiln_model_tensor_info* t) {
  const char* d = npy_field(h, "'descr'");
  const char* fo = npy_field(h, "'fortran_order'");
  const char* s = npy_field(h, "'shape'");
  char descr[16] = {0};
  if (!d || !fo || !s || *d != '\'' || sscanf(d + 1, "%15[^']", descr) != 1) {
    fprintf(stderr, "kiln_model_run: %s: malformed .npy header\n", path);
    return 1;
  }
  if (strncmp(fo, "False", 5) != 0) {
    fprintf(stderr, "kiln_model_run: %s: Fortran-order arrays are not supported\n", path);
    return 1;
  }
  if (!same_descr(descr, t->npy_descr)) {
    fprintf(stderr, "kiln_model_run: %s: dtype %s, input '%s' needs %s\n", path, descr, t->name, t->npy_descr);
    return 1;
  }
  int rank = 0, ok = *s == '(';
  for (const char* p = s + 1; ok && *p && *p != ')';) {
    if (*p == ' ' || *p == ',') {
      p++;
      continue;
    }
    char* end;
    long long dim = strtoll(p, &end, 10);
    if (end == p || rank >= t->rank || dim != t->shape[rank]) ok = 0;
    rank++;
    p = end;
  }
  if (!ok || rank != t->rank) {
    fprintf(stderr, "kiln_model_run: %s: shape %.*s does not match input '%s' (rank %d)\n", path,
            (int)(strchr(s, ')') ? strchr(s, ')') - s + 1 : 1), s, t->name, t->rank);
    return 1;
  }
  return 0;
}

static int read_input(const char* path, const kiln_model_tensor_info* t, void* buf) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "kiln_model_run: %s: %s\n", path, strerror(errno));
    return 1;
  }
  unsigned char m[10];
  int rc = 0;
  if (fread(m, 1, 10, f) == 10 && memcmp(m, "\x93NUMPY", 6) == 0) {
    size_t hlen = m[8] | (m[9] << 8);
    if (m[6] >= 2) {  /* version 2 and 3: a 4-byte length */
      unsigned char b[2];
      if (fread(b, 1, 2, f) != 2) rc = 1;
      hlen |= ((size_t)b[0] << 16) | ((size_t)b[1] << 24);
    }
    char* h = rc ? NULL : (char*)calloc(hlen + 1, 1);
    if (!h || fread(h, 1, hlen, f) != hlen) {
      fprintf(stderr, "kiln_model_run: %s: truncated .npy header\n", path);
      rc = 1;
    } else {
      rc = check_npy_header(path, h, t);
    }
    free(h);
  } else {
    rewind(f);  /* raw bytes */
  }
  if (!rc && fread(buf, 1, (size_t)t->bytes, f) != (size_t)t->bytes) {
    fprintf(stderr, "kiln_model_run: %s: too short: input '%s' needs %lld bytes of data\n", path, t->name,
            (long long)t->bytes);
    rc = 1;
  } else if (!rc && fgetc(f) != EOF) {
    fprintf(stderr, "kiln_model_run: %s: too long: input '%s' needs %lld bytes of data\n", path, t->name,
            (long long)t->bytes);
    rc = 1;
  }
  fclose(f);
  return rc;
}

/* OUTDIR/NAME.npy, with '/' and '\' in the name made '_' and a leading '.' prefixed by '_' (as
 * `kiln run` does), so a name never points outside OUTDIR. */
static int write_output(const char* dir, const kiln_model_tensor_info* t, const void* data) {
  size_t n = strlen(dir) + strlen(t->name) + 8;
  char* path = (char*)malloc(n);
  if (!path) return 1;
  snprintf(path, n, "%s/%s%s.npy", dir, t->name[0] == '.' || !t->name[0] ? "_" : "", t->name);
  for (char* c = path + strlen(dir) + 1; *c; ++c)
    if (*c == '/' || *c == '\\') *c = '_';
  char h[1024], shape[400] = "";
  for (int i = 0; i < t->rank; ++i)
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld%s", (long long)t->shape[i],
             t->rank == 1 ? "," : i + 1 < t->rank ? ", " : "");
  int len = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", t->npy_descr, shape);
  if (len < 0 || len + 65 > (int)sizeof h) {
    fprintf(stderr, "kiln_model_run: output '%s': rank too large for the .npy header\n", t->name);
    free(path);
    return 1;
  }
  int pad = (64 - (10 + len + 1) % 64) % 64;
  memset(h + len, ' ', (size_t)pad);
  h[len + pad] = '\n';
  len += pad + 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff), (unsigned char)(len >> 8)};
  FILE* f = fopen(path, "wb");
  int rc = !f || fwrite(pre, 1, 10, f) != 10 || fwrite(h, 1, (size_t)len, f) != (size_t)len ||
           fwrite(data, 1, (size_t)t->bytes, f) != (size_t)t->bytes;
  if (f && fclose(f) != 0) rc = 1;
  if (rc) fprintf(stderr, "kiln_model_run: %s: cannot write (%s)\n", path, strerror(errno));
  else printf("%s\n", path);
  free(path);
  return rc;
}

/* mkdir -p. */
static int make_dirs(const char* dir) {
  char* p = strdup(dir);
  int rc = 0;
  for (char* c = p + 1; p && *c && !rc; ++c)
    if (*c == '/') {
      *c = 0;
      rc = mkdir(p, 0777) != 0 && errno != EEXIST;
      *c = '/';
    }
  if (!p || rc || (mkdir(p, 0777) != 0 && errno != EEXIST)) {
    fprintf(stderr, "kiln_model_run: %s: %s\n", dir, strerror(errno));
    rc = 1;
  }
  free(p);
  return rc;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  const char* weights = NULL;
  const char* outdir = ".";
  int threads = 0, runs = 0, n_in = 0;
  const char** in = (const char**)calloc((size_t)argc, sizeof *in);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(kUsage, stdout);
      return 0;
    }
    if (a[0] == '-' && a[1] && !a[2] && strchr("wotn", a[1])) {
      if (i + 1 >= argc) {
        fprintf(stderr, "kiln_model_run: %s needs a value\n%s", a, kUsage);
        return 2;
      }
      const char* v = argv[++i];
      if (a[1] == 'w') weights = v;
      else if (a[1] == 'o') outdir = v;
      else if (a[1] == 't') threads = atoi(v);
      else runs = atoi(v);
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "kiln_model_run: unknown option %s\n%s", a, kUsage);
      return 2;
    } else {
      in[n_in++] = a;
    }
  }
  if (n_in != KILN_MODEL_NUM_INPUTS) {
    fprintf(stderr, "kiln_model_run: the model has %d input(s), %d file(s) given\n%s", KILN_MODEL_NUM_INPUTS,
            n_in, kUsage);
    return 2;
  }
  /* Default weights: beside the program. */
  char* wpath = NULL;
  if (!weights) {
    const char* slash = strrchr(argv[0], '/');
    size_t dl = slash ? (size_t)(slash - argv[0] + 1) : 0;
    wpath = (char*)malloc(dl + 12);
    memcpy(wpath, argv[0], dl);
    strcpy(wpath + dl, "weights.bin");
    weights = wpath;
  }
  if (kiln_model_init(weights) != KILN_MODEL_OK) {
    fprintf(stderr, "kiln_model_run: %s\n", kiln_model_error());
    return 1;
  }
  if (threads > 0) kiln_model_set_num_threads(threads);
  const void* inputs[KILN_MODEL_NUM_INPUTS + 1];
  void* outputs[KILN_MODEL_NUM_OUTPUTS + 1];
  for (int i = 0; i < KILN_MODEL_NUM_INPUTS; ++i) {
    const kiln_model_tensor_info* t = kiln_model_input_info(i);
    void* buf = alloc_buffer(t->bytes);
    if (!buf || read_input(in[i], t, buf)) return 1;
    inputs[i] = buf;
  }
  for (int i = 0; i < KILN_MODEL_NUM_OUTPUTS; ++i)
    if (!(outputs[i] = alloc_buffer(kiln_model_output_info(i)->bytes))) return 1;
  if (kiln_model_run(inputs, outputs) != KILN_MODEL_OK) {
    fprintf(stderr, "kiln_model_run: %s\n", kiln_model_error());
    return 1;
  }
  if (runs > 0) {
    double best = 1e300, total = 0;
    for (int r = 0; r < runs; ++r) {
      double t0 = now_ms();
      kiln_model_run(inputs, outputs);
      double dt = now_ms() - t0;
      total += dt;
      if (dt < best) best = dt;
    }
    fprintf(stderr, "kiln_model_run: %d runs: mean %.3f ms, min %.3f ms\n", runs, total / runs, best);
  }
  if (make_dirs(outdir)) return 1;
  int rc = 0;
  for (int i = 0; i < KILN_MODEL_NUM_OUTPUTS; ++i) rc |= write_output(outdir, kiln_model_output_info(i), outputs[i]);
  kiln_model_free();
  free(wpath);
  free(in);
  return rc;
}
)C";
}

std::string aot_makefile(const CompileOptions& compile) {
  std::string flags;
  for (const std::string& f : compile.flags)
    if (f != "-shared") flags += (flags.empty() ? "" : " ") + f;
  std::ostringstream os;
  os << "# Generated by kiln compile. `make` builds libkiln_model.a and the runner kiln_model_run;\n"
     << "# `make shared` builds libkiln_model.so. KILN_CFLAGS are the flags kiln's JIT uses for the same\n"
     << "# kernels: keep -ffp-contract as given (=off for a --strict-fp build: bit-identical to the reference)\n"
     << "# and -fopenmp (parallel loops).\n"
     << "CC = " << compile.compiler << "\n"
     << "AR = ar\n"
     << "OBJCOPY = objcopy\n"
     << "KILN_CFLAGS = " << flags << "\n"
     << "CFLAGS =\n"
     << "LDLIBS = -lm\n\n"
     << ".PHONY: all shared clean\n"
     << "all: libkiln_model.a kiln_model_run\n"
     << "shared: libkiln_model.so\n\n"
     << "# Only the kiln_model_* entry points stay global: the kernels are hidden and, where objcopy\n"
     << "# exists, made local, so the library links beside other code (and other bundles' kernels).\n"
     << "kiln_model.o: kiln_model.c kiln_model.h\n"
     << "\t$(CC) $(KILN_CFLAGS) -fvisibility=hidden $(CFLAGS) -c kiln_model.c -o $@\n"
     << "\tif command -v $(OBJCOPY) >/dev/null 2>&1; then $(OBJCOPY) --localize-hidden $@; fi\n\n"
     << "libkiln_model.a: kiln_model.o\n"
     << "\trm -f $@\n"
     << "\t$(AR) rcs $@ kiln_model.o\n\n"
     << "libkiln_model.so: kiln_model.c kiln_model.h\n"
     << "\t$(CC) $(KILN_CFLAGS) -fvisibility=hidden -shared $(CFLAGS) kiln_model.c -o $@ $(LDLIBS)\n\n"
     << "kiln_model_run: main.c kiln_model.h libkiln_model.a\n"
     << "\t$(CC) -O2 $(CFLAGS) main.c libkiln_model.a -o $@ -fopenmp $(LDLIBS)\n\n"
     << "clean:\n"
     << "\trm -f kiln_model.o libkiln_model.a libkiln_model.so kiln_model_run\n";
  return os.str();
}

std::string aot_readme(const std::string& model_path, const Graph& g) {
  std::ostringstream os;
  os << "kiln ahead-of-time bundle for " << model_path << "\n\n"
     << "Build:   make            (needs a C11 compiler with OpenMP; kiln is not needed)\n"
     << "Run:     ./kiln_model_run [-w weights.bin] [-o OUTDIR] [-t THREADS] [-n RUNS] INPUT...\n\n"
     << "Inputs, one file each, in this order (.npy with exactly this dtype and shape, or raw\n"
     << "little-endian row-major bytes of exactly that size):\n";
  auto list = [&](const std::vector<Value*>& vs) {
    for (size_t i = 0; i < vs.size(); ++i)
      os << "  " << i << ": " << vs[i]->name() << "  " << vs[i]->type().str() << "\n";
  };
  list(g.inputs());
  os << "Outputs, written as OUTDIR/<name>.npy ('/' and '\\' in names become '_'):\n";
  list(g.outputs());
  os << "With -n RUNS the model runs RUNS more times after the first and the latency goes to stderr.\n"
     << "float16 tensors are numpy float16; bfloat16 tensors travel as their bits (uint16).\n\n"
     << "Files:\n"
     << "  kiln_model.h   the API: kiln_model_init(weights path), kiln_model_run(inputs, outputs),\n"
     << "                 kiln_model_free(), kiln_model_error(), kiln_model_set_num_threads(n), and\n"
     << "                 KILN_MODEL_INPUT_<i>_* / KILN_MODEL_OUTPUT_<i>_* macros (name, dtype, rank,\n"
     << "                 shape, element count, bytes) to allocate buffers. Memory layout and thread\n"
     << "                 safety are described at its top.\n"
     << "  kiln_model.c   the generated kernels and the driver (one arena allocated by init).\n"
     << "  weights.bin    the constants (64-byte aligned after a 64-byte header with a hash that\n"
     << "                 kiln_model_init checks).\n"
     << "  main.c         this runner.\n"
     << "  Makefile       `make` (libkiln_model.a + kiln_model_run), `make shared`, `make clean`.\n\n"
     << "Embedding: #include \"kiln_model.h\", link libkiln_model.a with -fopenmp -lm, and ship\n"
     << "weights.bin. The code uses -march=native: build it on (or for) the machine that runs it.\n";
  return os.str();
}

}  // namespace kiln::runtime
