// SPDX-License-Identifier: Apache-2.0
// What the plugin knows of the local dualpathd: the rails (path.list), each
// class's decision (class.list: shares per rail), and the policy's mapping of
// NCCL's traffic classes and operations ([nccl], from policy.show), refreshed by a
// background thread at most every 100 ms over the control socket (one JSON
// object per line, core/protocol.h). The plugin links nothing of the daemon:
// this is a small client of its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "settings.h"

namespace dpnccl {

struct DaemonPath {
  std::string name, interface, state;  // state: up, suspect, down, holddown, ramping, drained
  uint64_t capacity_bps = 0;
  uint32_t fwmark = 0;
};

struct DaemonClass {
  std::string name;
  std::map<std::string, double> shares;  // path name -> percent
  std::vector<std::string> cgroups;      // cgroup directories of the class
};

struct DaemonSnapshot {
  uint64_t generation = 0;  // grows when anything below changed
  std::vector<DaemonPath> paths;
  std::vector<DaemonClass> classes;
  std::map<int, std::string> traffic_classes;     // [nccl] traffic_class.N
  std::map<std::string, std::string> operations;  // [nccl] operation.OP
  std::string default_class;
  const DaemonClass* klass(const std::string& name) const;
  const DaemonPath* path(const std::string& name) const;
};

// The [nccl] mapping and [node] default_class of a policy's text (as
// policy.show returns it). dualpathd has checked the policy, so the forms
// TOML allows for these keys are enough: dotted keys (operation.alltoall =
// "C"), an inline table, or [nccl.operation] / [nccl.traffic_class] tables.
void parse_policy_nccl(const std::string& text, DaemonSnapshot* s);

// One request and its reply's "data" (or an error message).
bool daemon_call(const std::string& socket, const std::string& cmd, std::string* data_json,
                 std::string* error, int timeout_ms = 1000);
// The same with arguments (a JSON object's text).
bool daemon_call_args(const std::string& socket, const std::string& cmd, const std::string& args,
                      std::string* data_json, std::string* error, int timeout_ms = 1000);

// What this process's plugin sent per class and rail, and its moves, for
// dualpathd's class list, metrics and events (nccl.report). One TCP stream
// of the plugin carries the chunks of every class its connection serves,
// so the kernel's counters per class cannot tell NCCL's classes apart: the
// plugin counts what was acknowledged and reports its running totals.
class Traffic {
 public:
  static constexpr size_t kMaxMoves = 64;  // kept between two reports
  void sent(const std::string& klass, const std::string& rail, uint64_t bytes);
  void moved(const std::string& klass, std::string reason);
  // A socket's mark was refused (no CAP_NET_ADMIN): the datapath counts the
  // plugin's streams in the class their port or cgroup matches, and the
  // reports say so, so that dualpathd does not count them twice.
  void unmarked();
  // nccl.report's arguments (JSON text), "" when nothing changed since the
  // last; takes the moves.
  std::string report(const std::string& process);

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> bytes_;
  std::vector<std::pair<std::string, std::string>> moves_;
  bool changed_ = false;
  bool unmarked_ = false;
};
Traffic& traffic();  // the process's

class DaemonView {
 public:
  ~DaemonView();
  // Reads the daemon once; false (and why) if it does not answer.
  bool start(const std::string& socket, std::string* error);
  void stop();
  bool running() const { return thread_.joinable(); }
  std::shared_ptr<const DaemonSnapshot> snapshot() const;

 private:
  bool refresh(std::string* error);
  void loop();
  std::string socket_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::shared_ptr<const DaemonSnapshot> snap_;
  std::thread thread_;
  // nccl.report every kReportTicks refreshes (200 ms) while bytes flow: the
  // scheduler counts them in their class's demand; off when the daemon does
  // not know it (older)
  static constexpr int kReportTicks = 2;
  int report_ticks_ = 0;
  bool report_ = true;
  // the policy's mapping, read at most every second (policy.show is the whole text)
  std::string policy_hash_;
  std::chrono::steady_clock::time_point policy_read_{};
  std::map<int, std::string> traffic_classes_;
  std::map<std::string, std::string> operations_;
  std::string default_class_;
};

// NCCL's operation as the policy names it: alltoall, allreduce, allgather,
// reducescatter, broadcast, reduce, sendrecv; "" for others. `op` is
// ncclNetAttr.op: a mask of 1 << ncclFunc_t (NCCL 2.28.3 and later set one
// function's bit before each transfer).
std::string operation_name(uint32_t op);

// The process's cgroup v2 path (/proc/self/cgroup), "" if none.
std::string own_cgroup();

// Where a request's bytes go: its class, why that class, and a share per rail
// (the plugin's rail order; they add up to 1 over the rails that are up).
struct Placement {
  std::string klass;  // "" without a daemon
  std::string why;
  std::vector<double> share;
  std::vector<bool> up;
  bool operator==(const Placement& o) const {
    return klass == o.klass && share == o.share && up == o.up;
  }
};

// The class, in this order: NCCL_DUALPATH_CLASS; the policy's mapping of the
// communicator's traffic class; of the operation setNetAttr announced; the
// class of the process's cgroup; the policy's default class. Without a
// daemon (snap null): shares by capacity, equal where capacities are unknown.
Placement place(const DaemonSnapshot* snap, const std::string& env_class, int traffic_class,
                uint32_t op, const std::string& cgroup, const std::vector<Rail>& rails);

}  // namespace dpnccl
