// SPDX-License-Identifier: Apache-2.0
// Multipath classes (policy key multipath = true; core/multipath.h): the
// MPTCP connections of those classes, a subflow per rail each, with roles
// from the classes' decisions. The connections are learnt from the path
// manager's events; one is ours when the datapath classified its first
// subflow into a multipath class. Others' MPTCP connections are never
// touched. Each tick reconciles every connection with where its class is.
//
// The namespace's MPTCP settings it needs (README, "Multipath classes") are
// set while the policy has a multipath class, the earlier values kept in
// /run/dualpath/<node>.mptcp-sysctls, and restored when the policy has none
// left or at dualpathd --cleanup.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "dualpath/core/multipath.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"
#include "dualpath/core/scheduler.h"
#include "dualpath/kernel/mptcp_pm.h"
#include "event_loop.h"

namespace dp {

class Datapath;

class Multipath {
 public:
  explicit Multipath(EventLoop& loop) : loop_(loop) {}
  ~Multipath();
  Multipath(const Multipath&) = delete;
  Multipath& operator=(const Multipath&) = delete;

  // A policy applied: starts (settings, path manager, events) when it has a
  // multipath class, stops and restores the settings when it has none.
  Result<void> set_policy(const Policy& p, Datapath& dp);
  bool running() const { return pm_ != nullptr; }

  // Every connection toward what `want` says (core/multipath.h).
  void reconcile(const multipath::Want& want);

  // The local ends of every subflow of ours: not for the failed-rail resets.
  bool is_subflow(const IpAddr& local, uint16_t lport) const;

  // Role changes and removed subflows since the last call, one event per
  // class, path and what was done (dpctl events).
  std::vector<SchedulerEvent> take_events();

  nlohmann::json connections_json() const;
  struct Counters {
    uint64_t created = 0, removed = 0, role_changes = 0, failed = 0;
  };
  const Counters& counters() const { return counters_; }
  // Per class, per path: subflows now.
  std::vector<std::vector<size_t>> subflows_per_path() const;

  // Connections of this namespace that asked for MPTCP and fell back to TCP
  // (the peer answered without it), from the kernel's MIB: every MPTCP
  // socket's, not only the multipath classes'.
  static uint64_t kernel_fallbacks();

  // Restores what set_policy() changed (dualpathd --cleanup).
  static Result<void> restore_settings(const std::string& node);

 private:
  void on_events();
  void on_event(const mptcp::Event& e);
  // The kernel's path manager events, one kind each (on_event() dispatches).
  void on_established(const mptcp::Event& e, std::chrono::steady_clock::time_point now);
  void on_created(const mptcp::Event& e);
  void on_subflow_established(multipath::Connection& c, const mptcp::Event& e,
                              std::chrono::steady_clock::time_point now);
  void on_subflow_closed(multipath::Connection& c, const mptcp::Event& e,
                         std::chrono::steady_clock::time_point now);
  void carry_out(multipath::Connection& c, const std::vector<multipath::Action>& actions);
  // Says that joins on `path` stopped being asked for (multipath::note_failure).
  void gave_up(const multipath::Connection& c, size_t path);
  // The path a subflow's packets leave on now, for what is shown: an
  // accepted subflow of the shared topology is answered on the rail it
  // arrives on, which the flow table holds (s.path is that at its start).
  size_t path_now(const multipath::Connection& c, const multipath::Subflow& s) const;
  // Whether the subflow stays on the rail it was made on (false: the
  // datapath places it, as any flow of its class, and it may move).
  bool bound(const multipath::Connection& c, const multipath::Subflow& s) const;
  Result<void> apply_settings(const std::string& node);
  // The accepting side: a server bound to one rail's address has no
  // listener where the peer's joins on the other rails arrive. A listener of
  // the daemon's own on each other rail's address and the same port takes
  // them: a join is matched to its connection by token, whatever listener
  // it reaches. One that cannot bind (the port is already listened on there,
  // or on every address) is not needed.
  void ensure_join_listeners(const multipath::Ends& accepted, size_t klass);
  void expire_join_listeners();
  void on_join_listener(int fd);
  struct JoinListener {
    int fd = -1;
    IpAddr addr;
    uint16_t port = 0;
    std::string klass;  // the class of the connections it was opened for
    std::chrono::steady_clock::time_point idle_since{};
  };
  std::vector<JoinListener> join_listeners_;
  // Tells the datapath (dp_joins) whose joins a listener accepts: sockops
  // gives them the class's TCP settings and subflow pacing.
  void note_join_listener(const JoinListener& l, std::optional<size_t> klass);

  EventLoop& loop_;
  Datapath* dp_ = nullptr;
  Policy policy_;
  std::unique_ptr<mptcp::PathManager> pm_;
  std::map<uint32_t, multipath::Connection> conns_;  // by token
  multipath::Want last_want_;
  // (token, path) -> a join asked for and not yet answered: the role it was
  // asked for, which its SUB_ESTABLISHED event (the peer's view) does not
  // carry, and its ends (the local port where this end chose it, else 0)
  struct Requested {
    bool backup = false;
    multipath::Ends ends;
  };
  std::map<std::pair<uint32_t, size_t>, Requested> requested_;
  // Ends each join of `c` under way for multipath::kJoinTimeout (its SYN
  // dropped on the way): its closing then counts as a join that never came up.
  void end_overdue_joins(multipath::Connection& c, std::chrono::steady_clock::time_point now);
  // (class, path, what) -> connections, for take_events()
  std::map<std::tuple<size_t, size_t, std::string>, size_t> done_;
  Counters counters_;
};

}  // namespace dp
