// SPDX-License-Identifier: Apache-2.0
// The lab test fixture shared by the lab test binaries: a private copy of the
// lab policies, the lab brought up once per binary and torn down at the end
// (even when a test fails), and helpers to read, write and fault it.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lab_util.h"

namespace lab {

extern std::string g_skip;      // non-empty: why the lab tests are skipped
extern std::string g_policies;  // private copies of the lab policies

void write_file(const std::string& p, const std::string& s);
// Readers never see a half-written file (as with sysfs attributes).
void write_file_atomic(const std::string& p, const std::string& s);
pid_t daemon_pid(const std::string& ns);
// Waits until a process has exited (not just been signalled).
void wait_gone(pid_t pid);
std::string nsenter(const std::string& ns);
// Waits until every rail of both nodes is up with BFD up; false on timeout.
bool wait_all_up(std::chrono::seconds timeout);
// The lab's own routes over rail0 (not dualpath's) that the kernel removed
// with an interface taken down, put back in ns (dpl-a or dpl-b).
void restore_lab_routes(const std::string& ns);

// Runs fn() with this thread in network namespace ns, then returns to the
// original one. Returns fn()'s error message, or why ns could not be entered.
template <class F>
std::string in_netns(const std::string& ns, F fn) {
  int self = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int target = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  std::string err;
  if (self < 0 || target < 0 || ::setns(target, CLONE_NEWNET) != 0) {
    err = "cannot enter " + ns;
  } else {
    err = fn();
    ::setns(self, CLONE_NEWNET);
  }
  if (self >= 0) ::close(self);
  if (target >= 0) ::close(target);
  return err;
}

// A dual-stack TCP listener on any address and `port` in this thread's
// network namespace (SO_REUSEADDR); its fd, or -1.
int listen_any(uint16_t port);

// A stream from a_ns to dst:port that reconnects at once whenever its
// connection ends, as an application that survives a reset does: the
// separate topology's failover, where a failed rail's connections are ended
// and new ones are placed on the other. The client sends 16 KiB writes paced
// at rate_bps (0: as fast as the connection takes them), with 100 ms send and
// connect timeouts; a dual-stack server in b_ns on any address reads it and
// notes when data arrives. Times are steady_clock nanoseconds.
class ReconnectingStream {
 public:
  ReconnectingStream(const std::string& a_ns, const std::string& b_ns, const std::string& dst,
                     uint16_t port, double rate_bps);
  ~ReconnectingStream();
  ReconnectingStream(const ReconnectingStream&) = delete;
  ReconnectingStream& operator=(const ReconnectingStream&) = delete;
  int connections() const { return connects_; }
  uint64_t received() const { return received_; }
  // The longest time without data arriving, from t until now.
  int64_t longest_gap_since(int64_t t) const;
  // When the first byte of a connection accepted after t arrived (0: none yet).
  int64_t first_new_byte_since(int64_t t) const;

 private:
  struct Read {
    int64_t at, accepted;  // when it arrived; when its connection was accepted
  };
  mutable std::mutex mu_;
  std::vector<Read> reads_;
  std::thread server_, client_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connects_{0};
  std::atomic<uint64_t> received_{0};
};

// Attaches drop.bpf.c (dropping per_100000 of packets) on ns/dev ingress at
// priority 5, behind dualpath's programs (or detaches it). Needs a clsact on
// dev. Returns an error message or "".
std::string attach_drop(const std::string& ns, const std::string& dev, uint32_t per_100000,
                        bool detach = false);

// Brings the lab up for one test binary. The policies are copied with the
// scheduler in static mode (tests assert the policy's rails) and edited by
// `edit`; `prepare` runs after the namespaces exist and before the daemons
// start, and returns an error to skip the tests.
class Env : public ::testing::Environment {
 public:
  std::function<std::string(const std::string&)> edit;
  std::function<std::string()> prepare;
  std::string topology = "shared";  // or "separate" (policies/lab-sep-*.toml)
  void SetUp() override;
  void TearDown() override;
};

class Fixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_skip.empty()) GTEST_SKIP() << "skipped: " << g_skip;
    mark_daemon_logs();
  }
  // A failed test prints what the lab's daemons logged while it ran.
  void TearDown() override {
    if (HasFailure()) print_daemon_log();
  }

  // Bytes each rail of dpl-a sent during fn().
  template <class F>
  std::pair<uint64_t, uint64_t> rail_delta(F fn) {
    uint64_t r0 = tx_bytes("dpl-a", "rail0"), r1 = tx_bytes("dpl-a", "rail1");
    fn();
    return {tx_bytes("dpl-a", "rail0") - r0, tx_bytes("dpl-a", "rail1") - r1};
  }

  // Asserts that `bytes` of a transfer left by `rail` and (almost) nothing by the other.
  static void expect_on(int rail, std::pair<uint64_t, uint64_t> d, uint64_t bytes,
                        const std::string& what);
  static json klass(const std::string& node, const std::string& name);
  // What node ns's daemon ("dpl-a", "dpl-b") logged since the test began.
  std::string daemon_log(const std::string& ns) const;

 private:
  void mark_daemon_logs();
  void print_daemon_log() const;
  std::vector<std::pair<std::string, uintmax_t>> log_marks_;  // log file, size at SetUp
};

}  // namespace lab
