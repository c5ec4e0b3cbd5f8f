// kiln._kiln: the nanobind extension behind the Python package (python/kiln/). It binds the public
// C++ API (include/kiln/model.h) and nothing else; the Python layer (python/kiln/*.py) gives it
// the onnxruntime-shaped surface. What lives here is what must be C++:
//   - numpy buffers handed to the kernels in place (nb::ndarray: the buffer's own pointer, no
//     copy; the Python layer copies once beforehand when an array is not C-contiguous/aligned);
//   - the GIL released while the model compiles and while kernels run, with one mutex per model
//     because a Model's arena and scratch are not reentrant (two Python threads take turns);
//   - kiln::Error mapped to the Python classes of kiln/_errors.py by Error::kind().
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kiln/model.h"

namespace nb = nanobind;

namespace {

// kiln dtype names (include/kiln/model.h) of the DLPack dtypes numpy arrays can carry.
std::string dtype_name(nb::dlpack::dtype dt) {
  using C = nb::dlpack::dtype_code;
  const int bits = dt.bits;
  if (dt.lanes == 1) switch (C(dt.code)) {
      case C::Float: if (bits == 16 || bits == 32 || bits == 64) return "f" + std::to_string(bits); break;
      case C::Bfloat: if (bits == 16) return "bf16"; break;
      case C::Int: if (bits == 8 || bits == 16 || bits == 32 || bits == 64) return "i" + std::to_string(bits); break;
      case C::UInt: if (bits == 8 || bits == 16 || bits == 32 || bits == 64) return "u" + std::to_string(bits); break;
      case C::Bool: if (bits == 8) return "bool"; break;
      default: break;
    }
  return "dlpack(code " + std::to_string(dt.code) + ", " + std::to_string(bits) + " bits)";
}

using Array = nb::ndarray<nb::device::cpu>;

// Row-major and dense, as numpy's C_CONTIGUOUS flag (strides of size-1 axes, and every stride of
// an empty array, do not matter).
bool c_contiguous(const Array& a) {
  for (size_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) == 0) return true;
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= int64_t(a.shape(i));
  }
  return true;
}

// One compiled model and the lock that serialises its runs.
struct PyModel {
  kiln::Model model;
  std::mutex run_lock;
  std::vector<uintptr_t> last_inputs;  // the buffers the last run read (for the zero-copy test)
};

// (name, dtype, shape) triples of inputs()/outputs().
std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> describe(const std::vector<kiln::TensorInfo>& v) {
  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> r;
  for (const auto& t : v) r.emplace_back(t.name, t.dtype, t.shape);
  return r;
}

std::unique_ptr<PyModel> compile(const std::string& path, int threads,
                                 const std::map<std::string, std::vector<int64_t>>& input_shapes, bool strict_fp,
                                 bool fusion, bool use_cache, const std::string& target, const std::string& device,
                                 nb::object progress) {
  kiln::ModelOptions opts;
  opts.device = device;
  opts.threads = threads;
  opts.input_shapes = input_shapes;
  opts.strict_fp = strict_fp;
  opts.fusion = fusion;
  opts.use_cache = use_cache;
  opts.target = target;
  // The callback runs on this thread with the GIL taken back for it. A Python exception in it
  // (KeyboardInterrupt while the bar is drawn) stops the compile and is re-raised as itself.
  std::optional<nb::python_error> callback_error;
  if (!progress.is_none())
    opts.progress = [&](const std::string& step, int done, int total) {
      nb::gil_scoped_acquire gil;
      try {
        progress(step, done, total);
      } catch (nb::python_error& e) {
        callback_error.emplace(std::move(e));
        throw kiln::Error("compile interrupted by the progress callback", kiln::Error::Kind::Usage);
      }
    };
  auto m = std::make_unique<PyModel>();
  try {
    nb::gil_scoped_release nogil;
    m->model = kiln::Model::compile(path, opts);
  } catch (const kiln::Error&) {
    if (callback_error) {
      callback_error->restore();
      throw nb::python_error();
    }
    throw;
  }
  return m;
}

// Checks `feeds` (name -> array) against the model with the CLI's messages, then runs the kernels
// on the arrays' buffers and writes into `outputs` (arrays the caller allocated in outputs() order).
void run(PyModel& self, const std::map<std::string, Array>& feeds, const std::vector<Array>& outputs) {
  std::map<std::string, kiln::TensorRef> refs;
  for (const auto& [name, a] : feeds) {
    kiln::TensorRef& r = refs[name];
    r.dtype = dtype_name(a.dtype());
    for (size_t i = 0; i < a.ndim(); ++i) r.shape.push_back(int64_t(a.shape(i)));
    r.data = a.data();
    if (!c_contiguous(a)) throw std::invalid_argument("internal: input '" + name + "' reached C++ not C-contiguous");
  }
  std::vector<const void*> in = self.model.bind(refs);  // kiln::Error (ModelError) on a wrong feed
  const auto& infos = self.model.outputs();
  if (outputs.size() != infos.size()) throw std::invalid_argument("internal: wrong number of output buffers");
  std::vector<void*> out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (dtype_name(outputs[i].dtype()) != infos[i].dtype || !c_contiguous(outputs[i]) || outputs[i].ndim() != infos[i].shape.size())
      throw std::invalid_argument("internal: output buffer " + std::to_string(i) + " does not match the model");
    out.push_back(outputs[i].data());
  }
  nb::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(self.run_lock);
  self.model.run_into(in, out);
  self.last_inputs.assign(in.size(), 0);
  for (size_t i = 0; i < in.size(); ++i) self.last_inputs[i] = reinterpret_cast<uintptr_t>(in[i]);
}

const char* kind_class(kiln::Error::Kind k) {
  switch (k) {
    case kiln::Error::Kind::Model: return "ModelError";
    case kiln::Error::Kind::UnsupportedOp: return "UnsupportedOp";
    case kiln::Error::Kind::Compile: return "CompileError";
    case kiln::Error::Kind::Usage: return "UsageError";
    case kiln::Error::Kind::Internal: return "InternalError";
  }
  return "Error";
}

}  // namespace

NB_MODULE(_kiln, m) {
  m.doc() = "kiln's compiled core; use the kiln package (kiln.InferenceSession, kiln.compile)";
  nb::object errors = nb::module_::import_("kiln._errors");
  // Kept alive for the translator (a module attribute holds the reference).
  m.attr("_errors") = errors;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const kiln::Error& e) {
      nb::object errs = nb::module_::import_("kiln._errors");
      PyErr_SetString(errs.attr(kind_class(e.kind())).ptr(), e.what());
    }
  });

  nb::class_<PyModel>(m, "Model")
      .def_prop_ro("inputs", [](const PyModel& s) { return describe(s.model.inputs()); })
      .def_prop_ro("outputs", [](const PyModel& s) { return describe(s.model.outputs()); })
      .def_prop_ro("threads", [](const PyModel& s) { return s.model.threads(); })
      .def_prop_ro("kernel_count", [](const PyModel& s) { return s.model.kernel_count(); })
      .def_prop_ro("compile_flags", [](const PyModel& s) { return s.model.compile_flags(); })
      .def_prop_ro("last_input_addresses", [](const PyModel& s) { return s.last_inputs; })
      .def("run", &run, nb::arg("feeds"), nb::arg("outputs"))
      .def("explain_json", [](const PyModel& s) { return s.model.explain_json(); })
      .def(
          "roofline_json",
          [](PyModel& s, int runs, int warmup, bool compare_unfused) {
            kiln::RooflineOptions o;
            o.runs = runs;
            o.warmup = warmup;
            o.compare_unfused = compare_unfused;
            nb::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(s.run_lock);  // it runs the model
            return s.model.roofline_json(o);
          },
          nb::arg("runs"), nb::arg("warmup"), nb::arg("compare_unfused"))
      .def(
          "save_bundle",
          [](PyModel& s, const std::string& dir) {
            nb::gil_scoped_release nogil;
            s.model.save_bundle(dir);
          },
          nb::arg("dir"));

  m.def("compile", &compile, nb::arg("path"), nb::arg("threads"), nb::arg("input_shapes"), nb::arg("strict_fp"),
        nb::arg("fusion"), nb::arg("use_cache"), nb::arg("target"), nb::arg("device"), nb::arg("progress").none());
  m.def("hardware_threads", [] { return int(std::max(1u, std::thread::hardware_concurrency())); });
}
