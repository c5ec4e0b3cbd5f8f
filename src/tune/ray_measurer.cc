#include "tune/ray_measurer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/error.h"
#include "tune/measure_wire.h"

namespace kiln::tune {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kPrefix = "KILN-RAY ";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The last non-empty line of a file (the driver's stderr log), for an error that has no better one.
std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

// Writes all of `data` to a pipe. SIGPIPE is blocked in this thread while it writes, so a driver
// that died makes this return false (EPIPE) instead of killing kiln; a SIGPIPE left pending by it
// is consumed before the old mask comes back.
bool write_all(int fd, const std::string& data) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  size_t done = 0;
  bool ok = true;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += size_t(n);
  }
  if (!ok && !sigismember(&old, SIGPIPE)) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

// `name` resolved on PATH as execvp would, but before fork (execvp may allocate); "" if absent.
std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/bin:/bin";
  for (;;) {
    const size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string cand = dir + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string_view::npos) return "";
    dirs.remove_prefix(colon + 1);
  }
}

}  // namespace

RayMeasurer::RayMeasurer(RayOptions opts) : opts_(std::move(opts)), here_(measuring_machine()) {
  if (opts_.address.empty()) user_error("--measurer ray needs --ray-address HOST:PORT (the head node)");
  std::error_code ec;
  if (!fs::is_regular_file(opts_.driver, ec)) user_error("the Ray measurer's driver ", opts_.driver, " is missing");
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  std::string templ = (tmp / "kiln-ray-XXXXXX").string();
  if (!::mkdtemp(templ.data())) user_error("cannot create a private folder for the Ray measurer in ", tmp.string());
  dir_ = templ;
  try {
    start();
  } catch (...) {
    // A constructor that throws runs no destructor: clean up here.
    stop_driver(true);
    fs::remove_all(dir_, ec);
    throw;
  }
}

void RayMeasurer::start() {
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  const std::string python = find_on_path(opts_.python);
  if (python.empty()) user_error("Ray measurer: ", opts_.python, " not found on PATH (the driver runs with it)");
  const std::vector<std::string> argv = {python, opts_.driver, "--address", opts_.address, "--kiln", opts_.kiln,
                                         "--connect-timeout", std::to_string(opts_.connect_timeout_s),
                                         "--job-timeout", std::to_string(opts_.job_timeout_s)};
  std::vector<char*> av;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  const std::string log = dir_ + "/driver.log";
  const std::string exec_failed = std::string(kPrefix) + "error cannot execute " + python + "\n";
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) user_error("cannot start the Ray driver: ", std::strerror(errno));
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(in_pipe[0]);
    ::close(in_pipe[1]);
    user_error("cannot start the Ray driver: ", std::strerror(errno));
  }
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  pid_ = log_fd < 0 ? -1 : ::fork();
  if (pid_ == 0) {
    ::dup2(in_pipe[0], STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(av[0], av.data());
    ssize_t ignored = ::write(STDOUT_FILENO, exec_failed.data(), exec_failed.size());
    (void)ignored;
    ::_exit(127);
  }
  const int err = errno;
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (log_fd >= 0) ::close(log_fd);
  to_driver_ = in_pipe[1];
  from_driver_ = out_pipe[0];
  if (pid_ < 0) {
    stop_driver(true);
    user_error("cannot start the Ray driver: ", std::strerror(err));
  }
  // The driver's own watchdog bounds ray.init; this bound also covers python's start and ray's
  // import (a few seconds on a loaded machine).
  const std::string ready = read_line(opts_.connect_timeout_s + 30, "connecting to the Ray cluster");
  if (ready.rfind("ready ", 0) != 0) driver_failed("unexpected reply from the Ray driver: " + ready);
  slots_ = std::max(1, std::atoi(ready.c_str() + 6));
}

RayMeasurer::~RayMeasurer() {
  stop_driver(false);
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void RayMeasurer::stop_driver(bool kill_now) {
  if (to_driver_ >= 0) ::close(to_driver_);  // end of input: the driver leaves its loop and exits
  if (from_driver_ >= 0) ::close(from_driver_);
  to_driver_ = from_driver_ = -1;
  if (pid_ <= 0) return;
  const auto t0 = Clock::now();
  int status = 0;
  while (!kill_now && seconds_since(t0) < 5) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

void RayMeasurer::driver_failed(const std::string& why) {
  stop_driver(true);
  user_error("Ray measurer: ", why);
}

std::string RayMeasurer::read_line(double timeout_s, const std::string& waiting_for) {
  const auto t0 = Clock::now();
  for (;;) {
    for (size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (line.rfind(kPrefix, 0) != 0) continue;  // Ray's own output, not the protocol
      line.erase(0, kPrefix.size());
      if (line.rfind("error ", 0) == 0) driver_failed(line.substr(6));
      return line;
    }
    if (from_driver_ < 0) user_error("Ray measurer: the driver has already failed");
    const double left = timeout_s - seconds_since(t0);
    if (left <= 0) driver_failed(cat("no answer from the Ray driver within ", int(timeout_s), " s (", waiting_for, ")"));
    pollfd p{from_driver_, POLLIN, 0};
    const int r = ::poll(&p, 1, int(std::min(left, 3600.0) * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;  // timeout: the deadline check above fires
    char buf[4096];
    const ssize_t n = ::read(from_driver_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string log = last_line(dir_ + "/driver.log");
      driver_failed(cat("the driver exited while ", waiting_for, log.empty() ? "" : ": " + log));
    }
    pending_.append(buf, size_t(n));
  }
}

MeasureResult RayMeasurer::measure(const MeasureRequest& req) { return measure_all({req})[0]; }

std::vector<MeasureResult> RayMeasurer::measure_all(const std::vector<MeasureRequest>& reqs) {
  if (reqs.empty()) return {};
  if (to_driver_ < 0) user_error("Ray measurer: the driver has already failed");
  const std::string round = dir_ + "/round_" + std::to_string(rounds_++);
  std::error_code ec;
  fs::create_directory(round, ec);
  if (ec) user_error("cannot create ", round, ": ", ec.message());
  for (size_t i = 0; i < reqs.size(); ++i)
    write_file_atomically(round + "/req_" + std::to_string(i) + ".bin", serialize_request(reqs[i]));
  if (!write_all(to_driver_, cat("JOB ", round, " ", reqs.size(), "\n"))) {
    const std::string log = last_line(dir_ + "/driver.log");
    driver_failed("the driver is gone" + (log.empty() ? std::string() : ": " + log));
  }
  // The driver bounds each job (job_timeout_s) and the round; this is the last resort when the
  // driver itself hangs.
  const double waves = double((reqs.size() + size_t(slots_) - 1) / size_t(slots_));
  const std::string reply = read_line(opts_.job_timeout_s * waves + 120, cat("measuring ", reqs.size(), " batches"));
  if (reply != "done") driver_failed("unexpected reply from the Ray driver: " + reply);
  std::vector<MeasureResult> out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::string path = round + "/res_" + std::to_string(i) + ".bin";
    MeasureResult r = parse_result(read_file_bytes(path), path);
    if (r.candidates.size() != reqs[i].kernels.size())
      user_error(path, ": ", r.candidates.size(), " measurements for ", reqs[i].kernels.size(), " candidates");
    // Records are keyed by this machine (the one running kiln tune): a node of another kind would
    // file its times under the wrong CPU.
    if (r.machine != here_)
      user_error("Ray measurer: a node measured on '", r.machine, "', but kiln tune runs on '", here_,
                 "'; its records would be keyed to the wrong machine (run kiln tune on one of the cluster's "
                 "identical machines)");
    out.push_back(std::move(r));
  }
  fs::remove_all(round, ec);
  return out;
}

}  // namespace kiln::tune
