// Child processes for tests that need another process (CUDA IPC).
//
// run_self(mode, args) runs this very test executable again as
//   <self> --cuarrow-child=<mode> <args...>
// with fork + exec (a child that is only forked cannot use the CUDA driver
// the parent initialised: it must start afresh), with the parent's
// environment (CUARROW_CUDA_DRIVER, CUARROW_EMULATED_DEVICES ...) plus
// overrides, and collects its exit status and output.  The executable's
// main() calls run_child_mode_if_asked() first; modes are registered with
// CUARROW_CHILD_MODE(name) { ... return 0; } and report failures on stdout.
// Header-only, shared by the core suite and the GPU-only tests.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace cuarrow_test {

struct child_result {
  bool started = false;
  bool exited = false;
  int code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string output;  // stdout and stderr together
  bool ok() const { return started && exited && code == 0 && !timed_out; }
};

using child_main = int (*)(int argc, char** argv);

inline std::map<std::string, child_main>& child_modes() {
  static std::map<std::string, child_main> modes;
  return modes;
}

inline bool register_child_mode(const char* name, child_main fn) {
  child_modes()[name] = fn;
  return true;
}

#define CUARROW_CHILD_MODE(name)                                         \
  static int cuarrow_child_##name(int argc, char** argv);                \
  [[maybe_unused]] static const bool cuarrow_child_registered_##name =   \
      ::cuarrow_test::register_child_mode(#name, &cuarrow_child_##name); \
  static int cuarrow_child_##name([[maybe_unused]] int argc, [[maybe_unused]] char** argv)

/// A check inside a child mode: prints where and what failed, returns 1.
#define CHILD_CHECK(cond)                                                          \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::printf("CHILD CHECK FAILED at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::fflush(stdout);                                                         \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

/// In main(), before anything else: runs the child mode named on the
/// command line, if any; sets *handled.  Exceptions are reported (exit 2).
inline int run_child_mode_if_asked(int argc, char** argv, bool* handled) {
  constexpr const char* flag = "--cuarrow-child=";
  *handled = false;
  if (argc < 2 || std::strncmp(argv[1], flag, std::strlen(flag)) != 0) return 0;
  *handled = true;
  const std::string mode = argv[1] + std::strlen(flag);
  auto it = child_modes().find(mode);
  if (it == child_modes().end()) {
    std::printf("unknown child mode %s\n", mode.c_str());
    return 3;
  }
  try {
    int rc = it->second(argc - 2, argv + 2);
    std::fflush(stdout);
    return rc;
  } catch (const std::exception& e) {
    std::printf("CHILD EXCEPTION: %s\n", e.what());
    std::fflush(stdout);
    return 2;
  }
}

inline child_result run_self(const std::string& mode, const std::vector<std::string>& args,
                             const std::vector<std::pair<std::string, std::string>>& env = {},
                             std::chrono::seconds timeout = std::chrono::seconds(120)) {
  child_result res;
  // Everything is prepared before fork: the parent has threads (the driver's
  // among them), so the child may only make async-signal-safe calls until exec.
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return res;
  self[n] = '\0';
  std::vector<std::string> argv_s = {self, "--cuarrow-child=" + mode};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    bool overridden = false;
    for (auto& [k, v] : env) {
      (void)v;
      if (std::strncmp(*e, k.c_str(), k.size()) == 0 && (*e)[k.size()] == '=') overridden = true;
    }
    if (!overridden) env_s.emplace_back(*e);
  }
  for (auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> argv_p, env_p;
  for (auto& s : argv_s) argv_p.push_back(s.data());
  argv_p.push_back(nullptr);
  for (auto& s : env_s) env_p.push_back(s.data());
  env_p.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return res;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return res;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(self, argv_p.data(), env_p.data());
    _exit(127);
  }
  res.started = true;
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      res.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(left.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t got = read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    res.output.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  res.exited = WIFEXITED(status);
  res.code = res.exited ? WEXITSTATUS(status) : -1;
  res.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return res;
}

inline std::string to_hex(const std::vector<std::byte>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte b : bytes) {
    auto v = static_cast<unsigned>(b);
    s += digits[v >> 4];
    s += digits[v & 15];
  }
  return s;
}

inline std::vector<std::byte> from_hex(const std::string& s) {
  std::vector<std::byte> out;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i + 1 < s.size(); i += 2) {
    int hi = nibble(s[i]), lo = nibble(s[i + 1]);
    if (hi < 0 || lo < 0) return {};
    out.push_back(static_cast<std::byte>(hi * 16 + lo));
  }
  return out;
}

}  // namespace cuarrow_test
