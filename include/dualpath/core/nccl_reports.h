// SPDX-License-Identifier: Apache-2.0
// What the NCCL plugins of this node (tools/nccl, dualpath-nccl(7)) report
// of their own traffic (the control socket's nccl.report): the bytes each
// process sent per class and path. One of the plugin's TCP streams carries
// the chunks of every operation of its connection, and a communicator's
// operations may belong to different classes, so the kernel's counters per
// class cannot tell them apart: the plugin counts what it sent and reports
// its running totals. The totals here only grow, for dpctl class list and
// the metrics' counters: a process's bytes stay counted after it stops
// reporting. The scheduler reads them paced (paced()): a class's demand and
// bytes per path include what the plugins sent in it. No I/O.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/core/rate_limit.h"

namespace dp {

class NcclReports {
 public:
  using Clock = std::chrono::steady_clock;
  // processes remembered (a report from one more forgets the one heard from
  // least recently; its bytes stay in the totals)
  static constexpr size_t kMaxProcesses = 1024;
  // a process that has not reported for this long is no longer counted as
  // reporting (dualpath_nccl_processes)
  static constexpr std::chrono::seconds kQuiet{30};
  // moves logged per process: a burst of kEventBurst, then one per
  // kEventEvery
  static constexpr int kEventBurst = 16;
  static constexpr std::chrono::seconds kEventEvery{2};

  struct Count {
    std::string klass, path;
    uint64_t bytes = 0;  // the process's running total
  };

  // Process `pid`'s running totals. A total below what the process reported
  // before starts its count again (a new process with the same pid).
  // `scheduled`: the process's sockets carry their path's fwmark, which the
  // datapath leaves unclassified, so its bytes are its classes' load
  // (paced()); false where its marks were refused and the datapath already
  // counts its streams in a class of its own choosing.
  void report(pid_t pid, const std::string& process, const std::vector<Count>& counts,
              Clock::time_point now, bool scheduled = true);
  // How many of `n` moves process `pid` may log now (its budget, which this
  // spends).
  int admit_events(pid_t pid, int n, Clock::time_point now) { return moves_.take(pid, n, now); }

  // Bytes of `klass` sent on `path` by every process that reported.
  uint64_t bytes(const std::string& klass, const std::string& path) const;
  const std::map<std::pair<std::string, std::string>, uint64_t>& totals() const { return totals_; }

  // The same bytes as the scheduler reads them, once per tick: a report's
  // new bytes are released evenly over the reporting process's last
  // interval between reports (kPaceMin to kPaceMax), so that a report every
  // few ticks reads as the steady rate it was sent at, not as one tick's
  // spike. Cumulative; never above bytes(). advance() first, each tick.
  static constexpr std::chrono::milliseconds kPaceMin{50};
  static constexpr std::chrono::milliseconds kPaceMax{2000};
  void advance(Clock::time_point now);
  uint64_t paced(const std::string& klass, const std::string& path) const;
  // Processes that reported within kQuiet of `now`.
  size_t reporting(Clock::time_point now) const;

  // Each process that reported within kQuiet of `now`, by pid (dpctl flow
  // list): its running totals per class and path, and what it sent per
  // second between its last two reports (0 after its first).
  struct ProcessView {
    pid_t pid = 0;
    std::string name;
    bool scheduled = true;
    std::chrono::duration<double> since{};  // since its last report
    struct Sent {
      std::string klass, path;
      uint64_t bytes = 0;
      // over the interval between its last two reports; none after one
      // report (or a restart's first): no interval yet
      std::optional<double> bytes_per_s;
    };
    std::vector<Sent> sent;
  };
  std::vector<ProcessView> processes(Clock::time_point now) const;

 private:
  struct Process {
    std::string name;
    std::map<std::pair<std::string, std::string>, uint64_t> last;
    std::map<std::pair<std::string, std::string>, double> rate;  // bytes/s, last interval
    bool scheduled = true;
    Clock::time_point seen{};
  };
  Process& process(pid_t pid, Clock::time_point now);
  std::map<pid_t, Process> procs_;
  std::map<std::pair<std::string, std::string>, uint64_t> totals_;
  RateLimiter<pid_t> moves_{kEventBurst, 1.0 / std::chrono::duration<double>(kEventEvery).count(),
                            kMaxProcesses};
  struct Paced {
    double released = 0;  // cumulative
    double pending = 0;   // reported, not yet released
    double rate = 0;      // bytes per second it is released at
  };
  std::map<std::pair<std::string, std::string>, Paced> paced_;
  Clock::time_point advanced_{};
};

}  // namespace dp
