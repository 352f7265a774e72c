// SPDX-License-Identifier: Apache-2.0
// The control socket's commands, each declared once (name, whether it
// mutates, a summary, its arguments, its handler) in the file of its object:
//
//   status.cpp   status, node.check
//   path.cpp     path.list, path.show, path.drain, path.undrain
//   class.cpp    class.list, class.set, class.unpin, class.run, class.env
//   flow.cpp     flow.list
//   events.cpp   events
//   policy.cpp   policy.show, policy.reload
//   nccl.cpp     nccl.report (from the NCCL plugin)
//
// A handler sees the daemon through Node: its components, and the few
// actions that sequence them. A query gathers plain data and renders it with
// core/views.h; a change goes through the Datapath (decisions) and the
// Controller (its state), then settles.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "control_server.h"
#include "dualpath/core/bursts.h"
#include "dualpath/core/carried.h"
#include "dualpath/core/controller.h"
#include "dualpath/core/event_log.h"
#include "dualpath/core/metrics.h"
#include "dualpath/core/nccl_reports.h"
#include "dualpath/core/policy.h"
#include "dualpath/kernel/datapath.h"
#include "dualpath/kernel/node_checks.h"
#include "measurements.h"
#include "multipath.h"
#include "path_monitor.h"

namespace dp {

// What the daemon counts of itself, for status and the metrics.
struct NodeState {
  std::chrono::steady_clock::time_point started{};
  uint64_t ticks = 0;
  std::vector<NodeCheck> checks;   // the rails against the topology, at the last apply
  uint64_t connections_reset = 0;  // ended on failed rails (separate topology)
  uint64_t reloads_applied = 0, reloads_refused = 0;
  bool last_reload_ok = true;
  TickTimes tick_times;  // how long each tick took
  // reserves: each path's policer as last written (core/police.h)
  std::vector<RailPolice> police;
  // per policy class: when it last sent anything (reserves count only then)
  std::vector<uint64_t> class_tx_bytes;
  std::vector<std::chrono::steady_clock::time_point> class_tx_at;
  // per policy class: the shares each path carried under its decision
  CarriedShares carried;
  // what the NCCL plugins sent, per class and path (commands/nccl.cpp)
  NcclReports nccl;
  // why the policy's multipath classes keep one subflow ("" when they do
  // not, or there are none): a setting the daemon could not make, such as
  // the MPTCP sysctls under a container's read-only /proc/sys. Readiness
  // fails while it is set; the daemon tries again every few seconds.
  std::string multipath_error;
  std::chrono::steady_clock::time_point multipath_tried{};
};

// The daemon as the commands and the metrics see it (the Daemon implements it).
class Node {
 public:
  virtual ~Node() = default;
  virtual const Policy& policy() const = 0;
  virtual Datapath& datapath() = 0;
  virtual const Datapath& datapath() const = 0;
  virtual Controller& controller() = 0;
  virtual const Controller& controller() const = 0;
  virtual const Measurements& measurements() const = 0;
  virtual const PathMonitor& monitor() const = 0;
  virtual const EventLog& events() const = 0;
  virtual const Multipath& multipath() const = 0;
  // What burst placement last planned each flow's next burst for.
  virtual const BurstSizes& burst_sizes() const = 0;
  virtual json responder_status() const = 0;
  virtual const NodeState& state() const = 0;
  // Carries out what the controller plans now (after a change).
  virtual void settle() = 0;
  // Re-reads the policy file (as SIGHUP does); the running policy stays on error.
  virtual Result<void> reload() = 0;
  // What a class's decision gives each path, as the class can carry it
  // (DP_SHARE_SCALE in all): the controller's decided shares, or for a
  // multipath class whose subflows also use rails the decision gives
  // nothing, the split its subflows make (multipath::subflow_shares).
  virtual Shares decided_shares(size_t klass) const = 0;
  // What the NCCL plugins reported (state().nccl), to count a report into.
  virtual NcclReports& nccl() = 0;
  // An event for dpctl events that no tick decided (an NCCL plugin's move).
  virtual void record(SchedulerEvent e) = 0;
};

// Every command, by object.
std::vector<Command> status_commands(Node& n);
std::vector<Command> path_commands(Node& n);
std::vector<Command> class_commands(Node& n);
std::vector<Command> flow_commands(Node& n);
std::vector<Command> events_commands(Node& n);
std::vector<Command> policy_commands(Node& n);
std::vector<Command> nccl_commands(Node& n);
// All of them, for the control server.
std::vector<Command> all_commands(Node& n);

// Shared by the commands of several objects (command.cpp).
json health_json(const Node& n, size_t path);
json paths_json(const Node& n);
// The hash of the policy file as it is on disk now (null if unreadable):
// edited and not reloaded, it differs from the running policy's.
json policy_disk_hash(const Node& n);
// The whole class on one path: the decision first, then the controller's
// state; a pin onto a rail without a weight is moved off it again (settle).
Result<void> place(Node& n, size_t klass, size_t path, bool operator_pin);
// Arguments the declaration has checked.
inline std::string arg(const json& args, const char* name) { return args[name].get<std::string>(); }

}  // namespace dp
