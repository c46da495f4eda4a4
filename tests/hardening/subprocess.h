// Runs the programs in apps/ as child processes with a time limit and a memory limit, capturing
// stdout and stderr, and checks the shape of a user-facing failure: exit code 1, one line on
// stderr that names the file and the problem, no signal, within the limits.
#pragma once

#include <string>
#include <vector>

namespace tllm::test {

struct RunLimits {
  double timeout_s = 10.0;                         // killed with SIGKILL after this
  unsigned long long address_space = 4ull << 30;   // RLIMIT_AS of the child (not under ASan: see run())
  std::string stdin_text;                          // fed on stdin (empty: /dev/null semantics)
};

struct RunResult {
  std::vector<std::string> argv;
  int exit_code = -1;      // when the child exited
  int signal = 0;          // when a signal ended it
  bool timed_out = false;  // killed at the time limit
  double seconds = 0;
  long max_rss_kb = 0;     // peak resident memory of the child
  std::string out, err;
  std::string describe() const;  // the command line and the outcome, for failure messages
};

// Runs argv[0] (a path) with argv. Under AddressSanitizer, whose shadow memory does not fit an
// address-space limit, the child gets ASAN_OPTIONS hard_rss_limit_mb instead of RLIMIT_AS.
RunResult run(const std::vector<std::string>& argv, const RunLimits& limits = {});
// Runs every command, up to `parallel` at a time (0: one per hardware thread, at least 2), and
// returns the results in order.
std::vector<RunResult> run_all(const std::vector<std::vector<std::string>>& commands, const RunLimits& limits = {},
                               unsigned parallel = 0);

// The program paths, from the build (compile definitions of the test target).
std::string tiny_llm_path();
std::string tiny_llm_bench_path();
std::string tiny_llm_kernel_bench_path();

// Asserts (gtest EXPECTs) that `r` is a clean failure: no signal, within the time limit, exit code
// 1, exactly one line on stderr starting with "<program>: error: " that contains every string in
// `needles` (the file's path, words naming the problem).
void expect_clean_failure(const RunResult& r, const std::string& program, const std::vector<std::string>& needles);
// No signal, no time-out, exit code 0.
void expect_success(const RunResult& r);

}  // namespace tllm::test
