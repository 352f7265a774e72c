// SPDX-License-Identifier: Apache-2.0
// The controller: every decision dualpathd makes, as a pure object. It holds
// the scheduler's state, the operators' pins, each class's demand and each
// rail's health, and turns what the daemon measured and heard into a Plan:
// the decisions to write (first: every packet sees them at once), the policy
// routing to rewrite (second), and the events to record. It never touches the
// kernel; the daemon carries the plan out and reports back what took effect
// (written(), routed()), so a failed write is retried on the next plan.
//
// Unit tests drive it through the failover cases the lab shows with real
// traffic (tests/unit/test_controller.cpp).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/bfd.h"
#include "dualpath/core/estimators.h"
#include "dualpath/core/health.h"
#include "dualpath/core/measure.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"
#include "dualpath/core/scheduler.h"

namespace dp {

// What identifies a rail across a reload: a path whose name, interface and
// BFD peer stay keeps its health, its BFD session and its hold-down.
std::string rail_key(const Policy& p, size_t path);

// A rail's health as one daemon leaves it to the next (the datapath keeps it
// pinned, dp_health): a restarted daemon starts from it, not from "up".
struct RailRecord {
  uint64_t key = 0;  // rail_key_hash(): the record is for this rail only
  RailState state = RailState::Up;
  bool bfd_seen = false;
  std::vector<double> former;  // per policy class: its share before the rail failed
  bool operator==(const RailRecord&) const = default;
};
uint64_t rail_key_hash(const Policy& p, size_t path);

// What the daemon measured in one tick, per policy path and class.
struct TickInput {
  SchedClock::time_point now;
  struct Path {
    double utilisation = 0;               // smoothed (EWMA)
    double tick_utilisation = 0;          // of the newest tick alone
    std::optional<double> ls_rtt_p50_us;  // latency-sensitive classes, >= 10 samples
    TcpCounters tcp;                      // cumulative, over every class
  };
  std::vector<Path> rails;               // per policy path
  std::vector<uint64_t> class_tx_bytes;  // per policy class, cumulative over every rail
  // per policy class, per policy path, cumulative (the separate topology's
  // placement by bytes)
  std::vector<std::vector<uint64_t>> class_path_tx_bytes;
  // per policy class, per policy path, cumulative: bytes that arrived
  // (what the peer sends where; data-path evidence)
  std::vector<std::vector<uint64_t>> class_path_rx_bytes;
};

struct DecisionWrite {
  size_t klass = 0;
  Shares shares;  // per policy path
  uint32_t flags = 0;
  // the scheduler's shares reshaped by health, before the separate
  // topology's placement by bytes (== shares otherwise)
  Shares health_shares;
  // Recorded once the write took effect (a move by path health).
  std::optional<SchedulerEvent> event;
};

struct Plan {
  std::vector<SchedulerEvent> events;  // record now
  std::vector<DecisionWrite> writes;   // first
  // then, when it must change: which rails policy routing goes around
  std::optional<std::vector<bool>> route_around;
  // last, in the separate topology: rails whose classified connections must
  // be ended (they cannot move; the reconnects are placed by the decisions
  // just written): every class on a failed rail, and on a suspect rail the
  // classes that leave it (health.suspect_moves: their flows are in RTO
  // backoff there)
  struct Reset {
    size_t path;
    bool latency_sensitive_only;
    bool suspect = false;  // the rail is suspect, not failed
    bool operator==(const Reset&) const = default;
  };
  std::vector<Reset> resets;
  // Flowcells (abi.h, dp_cell_cfg), when what the datapath has must change.
  struct Cells {
    uint32_t shift = 0;                // cell = 1 << shift bytes; 0: off
    std::vector<bool> classes;         // per policy class: placed by cells while split
    std::vector<uint32_t> ns_per_kib;  // per policy path: the capacity left to cells
    bool any_order = false;            // dp_cell_flags DP_CELL_F_ANY_ORDER
    bool bursts = false;               // DP_CELL_F_BURSTS: classes placed by bursts, not cells
    bool operator==(const Cells&) const = default;
  };
  std::optional<Cells> cells;
};

// Flowcells (or bursts) for a policy: the shared topology's elastic classes,
// when [scheduler] flowcell is not 0 (or placement is "bursts"). `other_bps` is, per path, what
// traffic other than cells sends there: a cell's time on a rail is its bytes over the capacity that
// is left (never less than a twentieth of the capacity).
Plan::Cells plan_cells(const Policy& p, const std::vector<double>& other_bps);

class Controller {
 public:
  using Time = SchedClock::time_point;

  // A policy, first or reloaded. `carrier` is each path's carrier now (for
  // rails it has not seen); `route_around` what routing goes around under it
  // (routed_around_for()); `pins` the operators' pins that survive.
  struct Pin {
    size_t klass;
    std::optional<size_t> path;
  };
  void set_policy(const Policy& next, const std::vector<bool>& carrier,
                  const std::vector<bool>& route_around, const std::vector<Pin>& pins, Time now);
  // On a restart, after the first set_policy: what the daemon before this one
  // left of each policy path (nullopt: nothing, or a record of another rail).
  void inherit(const std::vector<std::optional<RailRecord>>& records, Time now);
  // What to leave to the next daemon, per policy path.
  std::vector<RailRecord> records() const;
  // A path that is routed around now stays routed around under `next`.
  std::vector<bool> routed_around_for(const Policy& next) const;

  // What the rails say.
  void carrier(size_t path, bool up, Time now);
  void bfd(size_t path, bfd::State s, bfd::Diag diag, bool peer_admin_down, Time now);
  // The session went down because the peer's started afresh (bfd::Transition).
  void bfd_peer_restarted(size_t path, Time now);
  void vanished(size_t path);  // its interface is gone

  // One tick: health timers, data-path evidence, the scheduler, then settle().
  Plan tick(const TickInput& in);
  // Health moved (or may have): events, decisions, routing.
  Plan settle(Time now);

  // Operators.
  DecisionWrite place(size_t klass, size_t path, bool operator_pin) const;
  void placed(size_t klass, size_t path, bool operator_pin);  // after place()'s write
  void unpinned(size_t klass);
  Result<void> drain(size_t path, bool on, Time now);

  // What took effect.
  void written(const DecisionWrite& w);
  void routed(const std::vector<bool>& around);

  // Views.
  const Policy& policy() const { return policy_; }
  const PathHealth& health(size_t path) const { return paths_.at(path).health; }
  bool present(size_t path) const { return paths_.at(path).present; }
  bool all_down() const { return all_down_; }
  bool operator_pinned(size_t klass) const { return op_pinned_.at(klass); }
  const SchedulerState& scheduler() const { return sched_; }
  // The cell (or burst) settings as last planned; nullopt before the first.
  const std::optional<Plan::Cells>& cells() const { return cells_; }
  // What the decision map holds for a policy class (empty before a write).
  const Shares& written_shares(size_t klass) const { return written_.at(klass); }
  // What the decision gives each path: the written shares before the
  // separate topology leans new connections toward the rails that got less
  // than their share (== written_shares in the shared topology).
  const Shares& decided_shares(size_t klass) const { return written_health_.at(klass); }
  size_t paths_carrying() const;
  // Ticks in which a rail's flows had an RTO and retransmitted over 10%, and
  // data-path evidence did not take it for a failure: the rail was busy and
  // still acknowledged (congested), or its inbound arrived at line rate while
  // its data was acknowledged (the peer's queue held this end's ACKs).
  struct Discounted {
    uint64_t congested = 0, peer_queue = 0;
  };
  const Discounted& discounted(size_t path) const { return paths_.at(path).discounted; }

 private:
  struct Path {
    PathHealth health;
    std::string key;
    bool present = true;
    TcpCounters tcp_prev;        // for data-path evidence
    std::vector<double> former;  // per class: its share before the rail failed
    bool routed_around = false;
    Time settle_until{};        // no evidence against it before (it took over a failed rail)
    Time tcp_at{};              // when tcp_prev was read
    double clean_ack_rate = 0;  // ACKs per second of its flows in ticks without evidence
    Discounted discounted{};
  };

  // One tick's data-path evidence and the steps that judge it
  // (controller_evidence.cpp).
  struct Evidence;
  void check_evidence(const TickInput& in);
  void plan_cells(const TickInput& in, Plan& plan);
  void run_scheduler(const TickInput& in, Plan& plan);
  void health_events(Plan& plan);
  void first_back(Time now);
  void effective(Plan& plan) const;
  void routing(Plan& plan, Time now);
  uint32_t flags(size_t klass) const;

  Policy policy_;
  std::vector<Path> paths_;             // per policy path
  SchedulerState sched_;                // per policy class
  std::vector<bool> op_pinned_;         // per policy class: pinned with dpctl class set
  std::vector<RateEstimator> demand_;   // per policy class: transmit rate over all rails
  std::vector<Shares> written_;         // per policy class: what the decision map holds
  std::vector<Shares> written_health_;  // per policy class: its health_shares
  // per policy class, per policy path: transmit rate (placement by bytes)
  std::vector<std::vector<RateEstimator>> class_path_rate_;
  // per policy class, per policy path: bytes that arrived, the tick
  // before, and per second smoothed over ticks (data-path evidence)
  std::vector<std::vector<uint64_t>> rx_prev_;
  std::vector<std::vector<double>> rx_rate_;
  bool rx_primed_ = false;  // rx_prev_ holds a tick's counters (not so after set_policy)
  // per policy class, per policy path: a move off the path seen with too
  // few bytes on the other (to; the class's usual rate here when it began;
  // the bytes that arrived there since), waiting for more to confirm it
  struct MoveSeen {
    Time at;
    size_t to = 0;
    double usual = 0;
    uint64_t bytes = 0;
  };
  std::vector<std::vector<std::optional<MoveSeen>>> move_seen_;
  std::optional<Plan::Cells> cells_;  // as last planned (written by the daemon)
  Shares by_bytes(size_t klass, const Shares& shares) const;
  bool all_down_ = false;
};

}  // namespace dp
