// SPDX-License-Identifier: Apache-2.0
// dualpathd: owns the datapath of one node. The Daemon sequences the
// components and nothing else: start (socket claimed before the kernel is
// touched), apply (stage, routing, attach, commit; routing undone on
// failure), reload, the tick (measure, then the controller's plan: decisions
// before routing) and stop (BFD AdminDown, socket unlinked if still ours).
//
//   EventLoop      epoll, signals, the tick timer, BFD deadlines
//   ControlServer  the control socket, serving the commands of commands/
//                  (which see the daemon as a Node)
//   Datapath       skeleton, pins, slots; the one writer of decisions
//   Measurements   counters, link statistics, RDMA, per-path estimators
//   Controller     scheduler, pins, health, evidence: tick(inputs) -> plan
//   PathMonitor          BFD sessions and link events, into the controller
//   Multipath      multipath classes: MPTCP subflows per rail, their roles
//   EventLog       dpctl events; MetricsExporter /metrics
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "commands/command.h"
#include "control_server.h"
#include "dualpath/core/controller.h"
#include "dualpath/core/event_log.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"
#include "dualpath/kernel/datapath.h"
#include "dualpath/kernel/exporter.h"
#include "dualpath/kernel/node_checks.h"
#include "event_loop.h"
#include "measurements.h"
#include "multipath.h"
#include "path_monitor.h"
#include "responder.h"

namespace dp {

struct DaemonOptions {
  std::string policy_file;
  std::string socket_path = kDefaultSocket;
  std::string bpffs_root = "/sys/fs/bpf";  // pins go to <bpffs_root>/dualpath/<node>
  // Members of this group may query the control socket (mode 0660); only
  // root may change anything. Empty: the socket keeps the daemon's group.
  std::string socket_group;
};

class Daemon : private Node {
 public:
  explicit Daemon(DaemonOptions opts);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Validates the policy, loads or adopts the datapath, programs everything.
  Result<void> start();
  // Serves until SIGTERM/SIGINT; SIGHUP reloads. Returns the exit code.
  int run();

  // Removes everything dualpath created for this policy (dualpathd --cleanup).
  static Result<void> cleanup(const Policy& p, const std::string& bpffs_root);

 private:
  Result<void> apply_policy(const Policy& next);
  Result<std::string> reload_policy();  // what changed, in one line
  void arm_tick();
  void tick();
  void check_interfaces();
  void resync_routing(std::chrono::steady_clock::time_point now);
  // Says which routes the kernel refused (RoutingChange::refused) when that
  // set changes, not on every retry.
  void note_refused_routes(const std::vector<std::string>& refused);
  void apply_multipath(const Policy& p, std::chrono::steady_clock::time_point now, bool retry);
  void retry_multipath(std::chrono::steady_clock::time_point now);
  void adapt_flowlet_gap();
  void place_bursts();
  void note_class_tx(const std::vector<uint64_t>& tx, std::chrono::steady_clock::time_point now);
  void add_nccl_bytes(TickInput& in);
  void note_carried(const TickInput& in, std::chrono::steady_clock::time_point now);
  void keep_reserves(std::chrono::steady_clock::time_point now);
  void restart_responder(const Policy& next);
  // Carries a controller plan out: events, decisions first, then routing.
  void carry_out(Plan plan);
  void reset_connections(size_t path, bool latency_sensitive_only, bool suspect);
  void steer_multipath();  // each multipath connection toward its class's decision
  void note_subflow_shares(size_t klass, const std::vector<bool>& active);
  Result<void> start_metrics(const std::string& listen);
  void publish_metrics();

  // Node: what the commands and the metrics see
  const Policy& policy() const override { return policy_; }
  Datapath& datapath() override { return *datapath_; }
  const Datapath& datapath() const override { return *datapath_; }
  Controller& controller() override { return controller_; }
  const Controller& controller() const override { return controller_; }
  const Measurements& measurements() const override { return measurements_; }
  const PathMonitor& monitor() const override { return monitor_; }
  const EventLog& events() const override { return events_; }
  const Multipath& multipath() const override { return multipath_; }
  const BurstSizes& burst_sizes() const override { return burst_sizes_; }
  json responder_status() const override { return responder_.status(); }
  const NodeState& state() const override { return state_; }
  void settle() override { carry_out(controller_.settle(SchedClock::now())); }
  Result<void> reload() override;
  Shares decided_shares(size_t klass) const override;
  NcclReports& nccl() override { return state_.nccl; }
  void record(SchedulerEvent e) override { events_.record(std::move(e)); }

  DaemonOptions opts_;
  Policy policy_;
  bool have_policy_ = false;
  NodeState state_;
  BurstSizes burst_sizes_{kBurstHalfLife};
  // per policy class: what a multipath class's subflows carry where that is
  // not its decision (an elastic class on a wider rail too); empty otherwise
  std::vector<Shares> subflow_shares_;
  Streams streams_;               // which planned flows are streams (no gap comes)
  StreamPlanner stream_planner_;  // where they go
  bool plans_written_ = false;    // dp_plans may hold entries (placement = "bursts")
  bool neighbours_said_ = false;  // unresolved neighbours of a failed rail deleted: logged once
  std::vector<RailRecord> health_written_;  // dp_health as last written
  // policy routing compared with the kernel's (resync_routing): when, and
  // each rail's carrier then
  std::chrono::steady_clock::time_point routing_checked_{};
  std::vector<std::string> routes_refused_;  // the last note_refused_routes
  // check_interfaces: the last try at attaching to a rail's interface that
  // came back, and its error
  std::chrono::steady_clock::time_point reattach_tried_{};
  std::string reattach_error_;
  std::vector<bool> routing_carrier_;
  uint64_t routing_overflows_ = 0;  // monitor_.overflows() at the last check
  std::chrono::steady_clock::time_point cgroups_checked_{};

  EventLoop loop_;
  std::unique_ptr<ControlServer> control_;
  CommandTable commands_;
  std::unique_ptr<Datapath> datapath_;
  Measurements measurements_;
  Controller controller_;
  PathMonitor monitor_;
  EventLog events_;
  Responder responder_;         // dpctl validate/probe from other nodes
  Multipath multipath_{loop_};  // multipath classes' MPTCP subflows
  json responder_key_;          // what it was started with

  std::unique_ptr<MetricsExporter> metrics_;
  std::string metrics_listen_;
  std::optional<EventLoop::TimerId> tick_timer_;
  Nanos armed_tick_{0};
};

}  // namespace dp
