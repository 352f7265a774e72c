// SPDX-License-Identifier: Apache-2.0
// The node's datapath as dualpathd owns it: the BPF skeleton and its pins,
// the classification generation, the class and rail slots, the rails'
// ifindexes. Datapath is the one writer of the decision map, and the one
// reader of the counter maps.
//
// A policy goes in through stage() (nothing a packet sees), then the caller's
// routing, then attach() and commit() (the flip that makes it live).
#pragma once

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/abi.h"
#include "dualpath/core/bursts.h"
#include "dualpath/core/controller.h"
#include "dualpath/core/encode.h"
#include "dualpath/core/measure.h"
#include "dualpath/core/police.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"
#include "dualpath/core/scheduler.h"
#include "dualpath/core/views.h"
#include "dualpath/kernel/attach.h"
#include "dualpath/kernel/bpf_skeleton.h"
#include "dualpath/kernel/cgroups.h"
#include "dualpath/kernel/upgrade.h"

namespace dp {

// Per rail and class, summed over CPUs.
using CounterTable = std::array<std::array<dp_counters, DP_MAX_CLASSES>, DP_MAX_RAILS>;
using TcpTable = std::array<std::array<TcpCounters, DP_MAX_CLASSES>, DP_MAX_RAILS>;
using ExceptionTable = std::array<std::array<uint64_t, DP_EXC_MAX>, DP_MAX_RAILS>;
// Connections placed at connect time, per rail (and DP_CONNECT_UNMAPPED) and class.
using ConnectTable = std::array<std::array<uint64_t, DP_MAX_CLASSES>, DP_MAX_RAILS + 1>;

class Datapath {
 public:
  using FlowKeyBytes = std::array<uint8_t, sizeof(dp_flow_key)>;
  // Loads the programs, or adopts the maps pinned in pin_dir (a restart), and
  // pins the programs beside them.
  static Result<std::unique_ptr<Datapath>> open(const std::string& pin_dir);
  static std::string pin_dir(const std::string& bpffs_root, const std::string& node);
  // Removes everything dualpath created for this policy (dualpathd --cleanup).
  static Result<void> cleanup(const Policy& p, const std::string& bpffs_root);

  // A policy on its way in: slots, encodings and the inactive generation's
  // classification tables, written but invisible to packets.
  struct Staged {
    std::vector<int> class_slot, rail_slot;  // per policy class, per policy path
    std::vector<uint32_t> ifindex;           // per policy path
    std::vector<std::string> existing_classes;
    EncodedPolicy enc;
    std::vector<CgroupRule> cgroups;  // the policy's cgroup rules, as found now
    uint32_t gen = 0;
  };
  // `running`: a policy is live (this daemon's or an adopted one), so the
  // other generation is staged.
  Result<Staged> stage(const Policy& next, bool running);
  // dualpath's tc filters on every rail of `next`, and sockops on its cgroup.
  Result<void> attach(const Policy& next, const Staged& s);
  // PathMonitor, names, QoS and each class's starting decision, then the flip;
  // then what the new policy no longer names. Returns the operators' pins
  // that survive (dpctl class set outlives a reload or a restart).
  struct OperatorPin {
    size_t klass;
    std::optional<size_t> path;  // the policy path it is pinned to
  };
  Result<std::vector<OperatorPin>> commit(const Policy& next, const Staged& s);
  // The policy's [[peer]] table into dp_peers (commit's part).
  Result<void> write_peers(const Policy& next, const std::vector<int>& rail_slot);

  // Each policy path's health as the daemon before this one left it (after
  // commit: by the rail and class slots), and the one writer of dp_health.
  std::vector<std::optional<RailRecord>> health_records(size_t classes) const;
  Result<void> write_health(const std::vector<RailRecord>& records);

  // The one writer of dp_decisions. Shares are per policy path.
  Result<void> write_decision(size_t klass, const Shares& shares, uint32_t flags);
  Result<dp_decision> decision(size_t klass) const;
  // An operator's pin lifted: the decision stays, without kOperatorPinned.
  Result<void> clear_operator_pin(size_t klass);
  Result<void> set_flowlet_gap(uint64_t ns);
  // Flowcells (abi.h, dp_cell_cfg): `classes` per policy class, `ns_per_kib`
  // per policy path.
  Result<void> write_cells(uint32_t shift, const std::vector<bool>& classes,
                           const std::vector<uint32_t>& ns_per_kib, bool any_order = false,
                           bool bursts = false);
  // Bursts (abi.h, dp_plans): the flows of the classes placed by bursts
  // (`classes`, per policy class) that sent within `active` and are not
  // ACK-only, with what they burst (the largest DP_PLAN_TABLE_SIZE). Each
  // call reads the next `budget` entries of the flow table: the flows come
  // back when a sweep of the whole table ends, nullopt while it goes on. A
  // tick's cost so stays bounded at a full table (65,536 flows: one plan
  // every 16 ticks); the datapath ignores a plan whose rail lost its share.
  static constexpr size_t kFlowSweep = 4096;
  std::optional<std::vector<PlannedFlow>> burst_flows(const std::vector<bool>& classes,
                                                      std::chrono::nanoseconds active,
                                                      size_t budget = kFlowSweep);
  // Writes `plan` (paths per flow of burst_flows(); BurstPlan::kNone: no
  // plan) to dp_plans: what changed, and deletes what is no longer planned
  // (all of it for an empty `flows`).
  Result<void> write_plans(const std::vector<PlannedFlow>& flows, const BurstPlan& plan);
  // Flows whose next burst has a plan (as last written).
  size_t planned_flows() const { return plans_.size(); }
  Result<dp_cell_cfg> cells() const;
  uint64_t flowlet_gap_ns() const { return flowlet_gap_ns_; }

  // Classes by cgroup: finds the policy's cgroups again (a unit restarted,
  // a cgroup made, dpctl run) and updates the live generation when they
  // moved. Returns true when something changed.
  bool refresh_cgroups(const Policy& p);
  const std::vector<CgroupRule>& cgroups() const { return cgroups_; }
  // The cgroup v2 root the policy's cgroup paths are relative to ("" if none).
  const std::string& cgroup_root() const { return cgroup_root_; }

  // A rail whose interface was deleted (or has another ifindex now) stops
  // being a redirect target: returns true when `path` has just vanished.
  bool check_present(size_t path, const PathSpec& ps);
  bool present(size_t path) const { return path < vanished_.size() && !vanished_[path]; }
  // Shared topology: the rails the daemon counts usable (health), per path.
  // A multipath subflow accepted here is answered on the rail it arrives on
  // while that rail is (DP_RAIL_F_MP_UP; bpf/lib/tc.h). Written when it
  // changes; nothing outside the shared topology or without a multipath class.
  Result<void> set_rails_up(const std::vector<bool>& up);
  // Reserves: each rail's policer (core/police.h), per policy path. Written
  // when it changes (a write starts the bucket full).
  Result<void> write_police(const std::vector<RailPolice>& rails);
  // A join listener of the daemon's (daemon/multipath.cpp) on addr:port for
  // the policy class klass (index), or none there any more (nullopt): the
  // joins it accepts are the class's (dp_joins).
  Result<void> note_join_listener(const IpAddr& addr, uint16_t port, std::optional<size_t> klass);
  // Forgets every one: at start, the listeners were an earlier process's.
  void forget_join_listeners();
  // What the policers dropped, per policy path, summed over CPUs.
  std::vector<dp_police_drops> police_drops() const;

  // Counters, summed over CPUs.
  void read(CounterTable& counters, ExceptionTable& exceptions, TcpTable& tcp) const;
  std::vector<FlowRow> flows(size_t* total) const;
  // The policy class (index) of the TCP flow local:lport <-> remote:rport,
  // as the datapath classified it; nullopt if it is not in the flow table.
  std::optional<size_t> flow_class(const IpAddr& local, uint16_t lport, const IpAddr& remote,
                                   uint16_t rport) const;
  // The path it last left on (the shared topology's multipath subflows
  // accepted here leave on the rail they arrive on); nullopt if none.
  std::optional<size_t> flow_path(const IpAddr& local, uint16_t lport, const IpAddr& remote,
                                  uint16_t rport) const;
  // Bytes the flow table holds for it (what left this node; 0 if none).
  uint64_t flow_bytes(const IpAddr& local, uint16_t lport, const IpAddr& remote,
                      uint16_t rport) const;
  ConnectTable connects() const;
  // Per rail slot: connections addressed to this node on that rail, where
  // nothing listened, handed to the listener on another rail (sk_lookup).
  std::array<uint64_t, DP_MAX_RAILS> handovers() const;
  // Servers bound to one of this node's rail addresses go into dp_listeners,
  // for sk_lookup. UDP servers bound since the last call (cgroup post_bind
  // counts them): the iterator dp_udp_servers runs over this namespace's UDP
  // sockets. TCP listeners sockops did not see (listening before the
  // datapath was attached, or on an address that has just become a rail's):
  // dp_tcp_listeners, once after each commit. Every tick; costs one map read
  // when nothing was bound.
  void note_servers();
  std::optional<TcView> tc(int ifindex) const;

  // if_nametoindex() without its socket per call: a socket made and closed
  // every tick costs a veth rail ~10% of its TCP throughput (measured).
  unsigned ifindex_of(const std::string& ifname) const;
  uint32_t rail_ifindex(size_t path) const { return rail_ifindex_.at(path); }
  const std::vector<uint32_t>& rail_ifindexes() const { return rail_ifindex_; }
  size_t class_slot(size_t klass) const { return static_cast<size_t>(class_slot_.at(klass)); }
  size_t rail_slot(size_t path) const { return static_cast<size_t>(rail_slot_.at(path)); }
  const std::vector<int>& rail_slots() const { return rail_slot_; }

  // Why the kernel cannot make multipath classes' sockets MPTCP at socket()
  // ("" when it can: bpf/lib/mptcp.h).
  const std::string& mptcp_conversion_error() const;
  bool adopted() const { return adopted_; }
  // The layout version of the pins found at open (0: a build before
  // versioning; DP_LAYOUT_VERSION when adopted as they are, or loaded fresh).
  uint32_t found_layout() const { return found_layout_; }
  // What an upgrade from another layout carried over (empty: none happened).
  const std::vector<std::string>& upgrade_report() const { return upgrade_report_; }
  const std::string& pin_dir() const { return pin_dir_; }
  uint32_t generation() const { return gen_; }

 private:
  Datapath() = default;
  void note_tcp_listeners();

  std::unique_ptr<DpSkeleton> skel_;
  std::string pin_dir_;
  bool adopted_ = false;
  std::optional<uint64_t> udp_binds_;  // dp_udp_binds when the iterator last ran
  bool tcp_listeners_due_ = true;      // a commit since dp_tcp_listeners last ran
  uint32_t found_layout_ = DP_LAYOUT_VERSION;
  std::unique_ptr<LayoutUpgrade> upgrade_;  // until the programs are swapped (attach)
  std::vector<std::string> upgrade_report_;
  uint32_t gen_ = 0;
  uint32_t decision_version_ = 0;
  uint64_t flowlet_gap_ns_ = 0;  // as written to dp_config (adapted to the rails' RTTs)
  uint64_t netns_cookie_ = 0;
  std::string sockops_cgroup_;  // "" when TCP measurement is off
  std::vector<int> class_slot_;
  std::vector<int> rail_slot_;
  std::vector<dp_police> police_;  // per rail slot, as written (lock and bucket zero)
  // dp_plans as this process wrote it (read back once: a restart adopts it)
  std::map<FlowKeyBytes, std::pair<uint32_t, uint32_t>> plans_;  // flow key -> rail slot, flags
  bool plans_read_ = false;
  uint32_t plan_version_ = 0;
  // burst_flows' sweep: where it stands and the flows it found so far
  struct SweptFlow {
    dp_flow_key key;
    uint32_t cls;  // class slot
    uint32_t rail;
    uint64_t burst;
    uint32_t bursts;  // the flow's burst number
    uint64_t bytes;
    uint8_t flags;  // dp_flow.flags
  };
  Map<dp_flow_key, dp_flow>::Cursor sweep_;
  std::vector<SweptFlow> swept_;
  std::vector<uint32_t> rail_ifindex_;  // as attached
  std::vector<bool> vanished_;          // interface gone: not a redirect target
  std::vector<bool> rails_up_;          // as set_rails_up() last wrote it; empty: not used
  Topology topology_ = Topology::Shared;
  Fd ifreq_fd_;  // for SIOCGIFINDEX (ifindex_of)
  std::string cgroup_root_;
  std::vector<CgroupRule> cgroups_;  // as written to the live generation
  bool cgroup_cache_dirty_ = false;  // emptied once more at the next refresh

  std::optional<dp_flow> find_flow(const IpAddr& local, uint16_t lport, const IpAddr& remote,
                                   uint16_t rport) const;
  // A layout upgrade (upgrade.h): begun at open, finished by attach.
  Result<void> begin_upgrade();
  Result<void> finish_upgrade();
  // dp_cgroups of generation `gen` made to hold `rules` (by class slot), and
  // that generation's cache emptied. Returns how many cgroups it holds.
  Result<size_t> write_cgroups(uint32_t gen, const std::vector<CgroupRule>& rules,
                               const std::vector<int>& class_slot);
  void clear_cgroup_cache(uint32_t gen);
  Result<void> set_cgroup_gens(uint32_t gens);
  // The steps of commit(), in its order.
  Result<void> commit_rails(const Policy& next, const Staged& s);
  Result<void> commit_classes(const Policy& next, const Staged& s);
  Result<void> commit_config(const Policy& next, const Staged& s);
  void clear_unnamed(const Staged& s);
  void adopt_committed(const Policy& next, const Staged& s);
};

}  // namespace dp
