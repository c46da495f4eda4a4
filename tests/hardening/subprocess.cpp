#include "hardening/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

namespace tllm::test {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// An anonymous in-memory file for one stream of the child.
struct MemFd {
  int fd = -1;
  explicit MemFd(const char* name) {
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  }
  ~MemFd() {
    if (fd >= 0) close(fd);
  }
  MemFd(const MemFd&) = delete;
  MemFd& operator=(const MemFd&) = delete;
  std::string read_all() const {
    std::string s;
    char buf[65536];
    off_t at = 0;
    for (;;) {
      const ssize_t n = pread(fd, buf, sizeof buf, at);
      if (n <= 0) break;
      s.append(buf, size_t(n));
      at += n;
    }
    return s;
  }
};

std::string quoted_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    const bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$") == std::string::npos;
    s += plain ? a : "'" + a + "'";
  }
  return s;
}

}  // namespace

std::string RunResult::describe() const {
  std::string s = quoted_command(argv) + "\n  -> ";
  if (timed_out) {
    s += "timed out";
  } else if (signal) {
    s += "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  } else {
    s += "exit code " + std::to_string(exit_code);
  }
  s += ", " + std::to_string(seconds).substr(0, 5) + " s, max RSS " + std::to_string(max_rss_kb / 1024) + " MiB";
  s += "\n  stderr: " + err.substr(0, 2000);
  if (!out.empty()) s += "\n  stdout: " + out.substr(0, 600);
  return s;
}

RunResult run(const std::vector<std::string>& argv, const RunLimits& limits) {
  RunResult r;
  r.argv = argv;
  MemFd out("stdout"), err("stderr"), in("stdin");
  if (!limits.stdin_text.empty()) {
    if (pwrite(in.fd, limits.stdin_text.data(), limits.stdin_text.size(), 0) != ssize_t(limits.stdin_text.size())) {
      throw std::runtime_error("cannot write the child's stdin");
    }
  }

  // Everything the child needs is built before fork: after it only async-signal-safe calls run.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  std::string asan_options = "hard_rss_limit_mb=" + std::to_string(limits.address_space >> 20);
  for (char** e = environ; *e; ++e) {
    if (kAsan && std::strncmp(*e, "ASAN_OPTIONS=", 13) == 0) {
      asan_options = std::string(*e + 13) + ":" + asan_options;
      continue;
    }
    env_strings.emplace_back(*e);
  }
  if (kAsan) env_strings.push_back("ASAN_OPTIONS=" + asan_options);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const rlimit as_limit{limits.address_space, limits.address_space};

  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = -1;
  if (kAsan) {
    // No address-space limit to set, so posix_spawn (vfork-like): a fork of this process would
    // copy the page tables of its sanitizer shadow memory for every child.
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in.fd, 0);
    posix_spawn_file_actions_adddup2(&actions, out.fd, 1);
    posix_spawn_file_actions_adddup2(&actions, err.fd, 2);
    const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error(argv[0] + ": posix_spawn: " + std::strerror(rc));
  } else {
    pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      if (dup2(in.fd, 0) < 0 || dup2(out.fd, 1) < 0 || dup2(err.fd, 2) < 0) _exit(126);
      if (setrlimit(RLIMIT_AS, &as_limit) != 0) _exit(126);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
  }

  int status = 0;
  rusage ru{};
  for (;;) {
    const pid_t w = wait4(pid, &status, WNOHANG, &ru);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) throw std::runtime_error(std::string("wait4: ") + std::strerror(errno));
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > limits.timeout_s && !r.timed_out) {
      r.timed_out = true;
      kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.max_rss_kb = ru.ru_maxrss;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status) && !r.timed_out) r.signal = WTERMSIG(status);
  r.out = out.read_all();
  r.err = err.read_all();
  return r;
}

std::vector<RunResult> run_all(const std::vector<std::vector<std::string>>& commands, const RunLimits& limits,
                               unsigned parallel) {
  if (parallel == 0) parallel = std::max(2u, std::thread::hardware_concurrency());
  std::vector<RunResult> results(commands.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  for (unsigned t = 0; t < std::min<size_t>(parallel, commands.size()); ++t) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < commands.size();) {
        try {
          results[i] = run(commands[i], limits);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  if (error) std::rethrow_exception(error);
  return results;
}

std::string tiny_llm_path() { return TLLM_TINY_LLM; }
std::string tiny_llm_bench_path() { return TLLM_TINY_LLM_BENCH; }
std::string tiny_llm_kernel_bench_path() { return TLLM_TINY_LLM_KERNEL_BENCH; }

void expect_success(const RunResult& r) {
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(r.signal, 0) << r.describe();
  EXPECT_EQ(r.exit_code, 0) << r.describe();
}

void expect_clean_failure(const RunResult& r, const std::string& program, const std::vector<std::string>& needles) {
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(r.signal, 0) << r.describe();
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr is not exactly one line: " << r.describe();
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << r.describe();
  EXPECT_EQ(r.err.rfind(program + ": error: ", 0), 0u) << r.describe();
  for (const std::string& n : needles) {
    EXPECT_NE(r.err.find(n), std::string::npos) << "expected '" << n << "' in stderr: " << r.describe();
  }
  // Messages from the C++ library rather than from a check: a check is missing.
  for (const char* raw : {"std::", "bad_alloc", "basic_string", "vector::", "stoi", "stoll", "map::at"}) {
    EXPECT_EQ(r.err.find(raw), std::string::npos) << "unchecked failure: " << r.describe();
  }
}

}  // namespace tllm::test
