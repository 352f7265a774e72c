// SPDX-License-Identifier: Apache-2.0
// dualpathd: owns the datapath of one node. The Daemon sequences the
// components and nothing else: start (socket claimed before the kernel is
// touched), apply (stage, routing, attach, commit; routing undone on
// failure), reload, the tick (measure, then the controller's plan: decisions
// before routing) and stop (BFD AdminDown, socket unlinked if still ours).
//
//   EventLoop      epoll, signals, the tick timer, BFD deadlines
//   ControlServer  the control socket; commands.cpp holds the command table
//   Datapath       skeleton, pins, slots; the one writer of decisions
//   Measurements   counters, link statistics, RDMA, per-path estimators
//   Controller     scheduler, pins, health, evidence: tick(inputs) -> plan
//   Rails          BFD sessions and link events, into the controller
//   Multipath      multipath classes: MPTCP subflows per rail, their roles
//   EventLog       dpctl events; MetricsExporter /metrics
#pragma once

#include <chrono>
#include <memory>
#include <string>

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
#include "rails.h"
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

class Daemon {
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
  Result<void> reload();                // reload_policy(), counted for the metrics
  Result<std::string> reload_policy();  // what changed, in one line
  void arm_tick();
  void tick();
  void check_interfaces();
  void adapt_flowlet_gap();
  void place_bursts();
  void restart_responder(const Policy& next);
  // Carries a controller plan out: events, decisions first, then routing.
  void carry_out(Plan plan);
  void settle() { carry_out(controller_.settle(SchedClock::now())); }
  void reset_connections(size_t path, bool latency_sensitive_only);
  void steer_multipath();  // each multipath connection toward its class's decision
  Result<void> start_metrics(const std::string& listen);
  void publish_metrics();

  // commands.cpp: the control socket's command table and what it renders
  void add_commands();
  json status_json() const;
  json node_check_json() const;
  json paths_json() const;
  json classes_json() const;
  json flows_json(const json& args) const;
  json multipath_json() const;
  json health_json(size_t path) const;
  json policy_disk_hash() const;
  json class_set(const json& args);
  json class_unpin(const json& args);
  json class_run(const json& args);
  json class_env(const json& args) const;
  json drain(const json& args, bool on);
  Result<void> place(size_t klass, size_t path, bool operator_pin);

  DaemonOptions opts_;
  Policy policy_;
  bool have_policy_ = false;
  std::chrono::steady_clock::time_point started_;
  uint64_t ticks_ = 0;
  bool plans_written_ = false;    // dp_plans may hold entries (placement = "bursts")
  bool neighbours_said_ = false;  // unresolved neighbours of a failed rail deleted: logged once
  std::chrono::steady_clock::time_point cgroups_checked_{};

  EventLoop loop_;
  std::unique_ptr<ControlServer> control_;
  CommandTable commands_;
  std::unique_ptr<Datapath> datapath_;
  Measurements measurements_;
  Controller controller_;
  Rails rails_;
  EventLog events_;
  Responder responder_;         // dpctl validate/probe from other nodes
  Multipath multipath_{loop_};  // multipath classes' MPTCP subflows
  json responder_key_;          // what it was started with

  std::unique_ptr<MetricsExporter> metrics_;
  std::string metrics_listen_;
  uint64_t reloads_applied_ = 0, reloads_refused_ = 0;
  uint64_t connections_reset_ = 0;  // ended on failed rails (separate topology)
  std::vector<NodeCheck> checks_;   // the rails against the topology, at the last apply
  bool last_reload_ok_ = true;
  std::optional<EventLoop::TimerId> tick_timer_;
  Nanos armed_tick_{0};
};

}  // namespace dp
