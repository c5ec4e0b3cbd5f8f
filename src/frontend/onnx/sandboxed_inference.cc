#include "frontend/onnx/sandboxed_inference.h"

#include <onnx/defs/schema.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "support/error.h"

namespace kiln {

namespace {

struct ChildResult {
  bool crashed = false;   // killed by a signal (or exited without a reply)
  int signal = 0;
  bool failed = false;    // the inference threw; `text` is its message
  std::string text;       // on success: a serialized GraphProto with value_info and outputs
};

bool write_all(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// Forks; the child runs InferShapes on its copy of `model` (its first `prefix` nodes when
// prefix >= 0) and writes 'O' + types or 'E' + message to the pipe.
ChildResult run_in_child(const onnx::ModelProto& model, const onnx::ShapeInferenceOptions& options, int prefix) {
  int fds[2];
  if (::pipe(fds) != 0) user_error("cannot create a pipe for shape inference: ", std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    user_error("cannot fork for shape inference: ", std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // A crash must kill the child plainly, not run the parent's handlers (a fuzzer's or a
    // sanitizer's would report the parent's crash, or write artifacts).
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) std::signal(sig, SIG_DFL);
    std::string reply;
    try {
      // The child's memory is its own copy-on-write image: infer in place rather than copying the
      // weights once more.
      onnx::ModelProto& m = const_cast<onnx::ModelProto&>(model);
      if (prefix >= 0) {
        auto* nodes = m.mutable_graph()->mutable_node();
        while (nodes->size() > prefix) nodes->RemoveLast();
        m.mutable_graph()->clear_output();
      }
      onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), options);
      onnx::GraphProto types;
      *types.mutable_value_info() = m.graph().value_info();
      *types.mutable_output() = m.graph().output();
      reply = "O" + types.SerializeAsString();
    } catch (const std::exception& e) {
      reply = std::string("E") + e.what();
    }
    const bool ok = write_all(fds[1], reply.data(), reply.size());
    ::_exit(ok ? 0 : 3);  // no atexit handlers, no destructors of the parent's objects
  }
  ::close(fds[1]);
  ChildResult r;
  std::string data;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(buf, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) user_error("waiting for shape inference failed: ", std::strerror(errno));
  if (WIFSIGNALED(status) || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || data.empty()) {
    r.crashed = true;
    r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return r;
  }
  r.failed = data[0] == 'E';
  r.text = data.substr(1);
  return r;
}

std::string signal_name(int sig) {
  if (sig == 0) return "an abnormal exit";
  const char* d = ::strsignal(sig);
  return d ? cat("signal ", sig, ", ", d) : cat("signal ", sig);
}

}  // namespace

void infer_shapes_sandboxed(onnx::ModelProto& model, const onnx::ShapeInferenceOptions& options,
                            const std::function<std::string(int)>& node_ctx) {
  // Built in the parent so that the child does not race another thread's first use of it.
  (void)onnx::OpSchemaRegistry::Instance();
  ChildResult r = run_in_child(model, options, -1);
  if (r.crashed) {
    // The smallest prefix of nodes whose inference crashes ends with the culprit: inference visits
    // nodes in order and continues past node errors (error_mode 0), so crashing is monotone in
    // the prefix length.
    int lo = 0, hi = model.graph().node_size();  // prefix lo does not crash, prefix hi does
    int sig = r.signal;
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      ChildResult p = run_in_child(model, options, mid);
      if (p.crashed) {
        hi = mid;
        sig = p.signal;
      } else {
        lo = mid;
      }
    }
    if (hi >= 1)
      user_error(node_ctx(hi - 1), ": ONNX shape inference crashes on this node (", signal_name(sig),
                 "); its attributes or inputs are malformed");
    user_error("ONNX shape inference crashed (", signal_name(sig), "); the model is malformed");
  }
  if (r.failed) {
    std::string msg = r.text;
    for (char& c : msg)
      if (c == '\n') c = ' ';
    user_error("ONNX shape inference failed: ", msg);
  }
  onnx::GraphProto types;
  if (!types.ParseFromString(r.text)) throw InternalError("shape inference child sent an unreadable reply");
  *model.mutable_graph()->mutable_value_info() = types.value_info();
  *model.mutable_graph()->mutable_output() = types.output();
}

}  // namespace kiln
