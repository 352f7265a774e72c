// SPDX-License-Identifier: Apache-2.0
// What the control socket's replies say about paths, classes, flows and
// health, rendered from plain data: the daemon gathers the data (maps, tc,
// measurements), these functions only render. Every key here is part of the
// control protocol (tests/golden/ holds their shapes).
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/abi.h"
#include "dualpath/core/bfd.h"
#include "dualpath/core/carried.h"
#include "dualpath/core/health.h"
#include "dualpath/core/measure.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/protocol.h"

namespace dp {

// dualpath's tc filters on an interface (0: absent).
struct TcView {
  uint32_t egress_prog_id = 0, ingress_prog_id = 0;
  bool clsact_owned = false;
};

// One entry of the flow table.
struct FlowRow {
  dp_flow_key key;
  dp_flow flow;
};

struct PathView {
  const PathSpec* spec = nullptr;
  int ifindex = 0;
  int slot = 0;
  std::optional<TcView> tc;
  dp_counters sum{};  // over every class
  std::array<uint64_t, DP_EXC_MAX> exceptions{};
  const PathMeasure* measure = nullptr;  // null until the first sample
  std::vector<std::string> rdma_devices;
  double datapath_tx_bps = 0;
  bool present = true;
  json health;
};
// An element of path.list (and path.show).
json render_path(const PathView& v, Clock::time_point now);

struct ClassView {
  const ClassSpec* spec = nullptr;
  uint32_t slot = 0;
  dp_decision decision{};
  struct OnPath {
    std::string name;
    size_t rail_slot = 0;
    dp_counters counters{};
    TcpCounters tcp;
    uint64_t connections = 0;    // placed at connect time on this path
    uint64_t capacity_bps = 0;   // the policy's, for the class's reserve there
    uint64_t nccl_tx_bytes = 0;  // NCCL plugins' bytes of the class here, by their count
  };
  std::vector<OnPath> paths;  // per policy path
  Topology topology = Topology::Shared;
  uint64_t connections_unmapped = 0;  // left alone: no rail's network holds the destination
  struct Cgroup {
    std::string rule;  // "cgroup /x", "unit x.service", "dpctl run"
    std::string dir;   // "" when not found
    uint64_t id = 0;   // 0: absent now
  };
  std::vector<Cgroup> cgroups;
  // what its decision gives each path (per policy path, DP_SHARE_SCALE in
  // all; in the separate topology `decision` leans new connections toward
  // the rails that got less), and what each path carried of it under that
  // decision (nullopt: too little yet)
  std::vector<uint16_t> decided;
  std::optional<CarriedShares::Carried> carried;
};
// An element of class.list.
json render_class(const ClassView& v);

// "mark", "port", "cgroup", "default" for enum dp_rule ("" for none).
const char* rule_name(int rule);

// flow.list's data: its rows, and how many flows the table holds; class and
// rail names by slot.
json render_flows(const std::vector<FlowRow>& rows, size_t total,
                  const std::array<std::string, DP_MAX_CLASSES>& class_name,
                  const std::array<std::string, DP_MAX_RAILS>& rail_name, uint64_t now_ns);

// How each destination prefix of the policy is steered, and why.
json render_steering(const Policy& p);

struct BfdView {
  std::string peer;
  const bfd::Session* session = nullptr;
  uint64_t discarded = 0;
};
// A path's "health" object; bfd is null when the path has no session.
json render_health(const PathHealth& h, const BfdView* bfd, SchedClock::time_point now);

}  // namespace dp
