// SPDX-License-Identifier: Apache-2.0
// Datapath: the flow table and what is written per flow: the sweep that
// finds flows worth a burst plan, the plans, join listeners of multipath
// classes, and lookups of one connection's flow.
#include "dualpath/kernel/datapath.h"

#include <netinet/in.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace dp {

namespace {

Datapath::FlowKeyBytes key_bytes(const dp_flow_key& k) {
  Datapath::FlowKeyBytes b;
  std::memcpy(b.data(), &k, sizeof(k));
  return b;
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // bpf_ktime_get_ns()
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// An ACK-only flow (the reverse of a bulk flow) has no bursts worth a plan:
// its packets average far below a data segment.
constexpr uint64_t kMinMeanPacket = 256;
// Nor has a flow whose bursts are smaller than this.
constexpr uint64_t kMinBurst = 16 << 10;

}  // namespace

std::optional<std::vector<PlannedFlow>> Datapath::burst_flows(const std::vector<bool>& classes,
                                                              std::chrono::nanoseconds active,
                                                              size_t budget) {
  std::array<size_t, DP_MAX_CLASSES> klass;
  klass.fill(BurstPlan::kNone);
  bool any = false;
  for (size_t c = 0; c < classes.size() && c < class_slot_.size(); ++c)
    if (classes[c] && class_slot_[c] >= 0 && class_slot_[c] < DP_MAX_CLASSES) {
      klass[static_cast<size_t>(class_slot_[c])] = c;
      any = true;
    }
  if (!any) {  // nothing to plan: a later sweep starts afresh
    sweep_ = {};
    swept_.clear();
    return std::vector<PlannedFlow>{};
  }
  const uint64_t now = monotonic_ns();
  const auto since = static_cast<uint64_t>(active.count());
  bool done = skel_->dp_flows().sweep(sweep_, budget, [&](const dp_flow_key& k, const dp_flow& f) {
    if (f.cls >= DP_MAX_CLASSES || klass[f.cls] == BurstPlan::kNone) return;
    if (f.last_seen_ns + since < now || !f.packets || f.bytes / f.packets < kMinMeanPacket) return;
    uint64_t burst = std::max(f.last_burst, f.burst_bytes);
    if (burst < kMinBurst) return;
    swept_.push_back({k, f.cls, f.rail, burst, f.flowlet, f.bytes, f.flags});
  });
  if (!done) return std::nullopt;

  std::array<size_t, DP_MAX_RAILS> path;
  path.fill(BurstPlan::kNone);
  for (size_t i = 0; i < rail_slot_.size(); ++i)
    if (rail_slot_[i] >= 0 && rail_slot_[i] < DP_MAX_RAILS)
      path[static_cast<size_t>(rail_slot_[i])] = i;
  // the table holds the largest bursts when there are more flows than it
  if (swept_.size() > DP_PLAN_TABLE_SIZE) {
    std::nth_element(swept_.begin(), swept_.begin() + DP_PLAN_TABLE_SIZE, swept_.end(),
                     [](const SweptFlow& a, const SweptFlow& b) { return a.burst > b.burst; });
    swept_.resize(DP_PLAN_TABLE_SIZE);
  }
  std::vector<PlannedFlow> out;
  out.reserve(swept_.size());
  for (const auto& f : swept_)
    if (klass[f.cls] != BurstPlan::kNone)  // a class may have stopped being split mid-sweep
      out.push_back(
          {f.key,
           {klass[f.cls], f.rail < DP_MAX_RAILS ? path[f.rail] : BurstPlan::kNone, f.burst},
           f.bursts,
           f.bytes,
           f.flags});
  swept_.clear();
  return out;
}

Result<void> Datapath::write_plans(const std::vector<PlannedFlow>& flows, const BurstPlan& plan) {
  auto m = skel_->dp_plans();
  if (!plans_read_) {  // what a previous process planned is ours to keep or delete
    for (auto& [k, v] : m.entries()) plans_[key_bytes(k)] = {v.rail, v.flags};
    plans_read_ = true;
  }
  std::map<FlowKeyBytes, std::pair<uint32_t, uint32_t>> want;
  for (size_t i = 0; i < flows.size() && i < plan.path.size(); ++i) {
    size_t p = plan.path[i];
    if (p == BurstPlan::kNone || p >= rail_slot_.size() || rail_slot_[p] < 0) continue;
    const uint32_t flags = i < plan.stream.size() && plan.stream[i] ? DP_PLAN_F_STREAM : 0;
    want[key_bytes(flows[i].key)] = {static_cast<uint32_t>(rail_slot_[p]), flags};
  }
  for (auto it = plans_.begin(); it != plans_.end();) {
    if (want.count(it->first)) {
      ++it;
      continue;
    }
    dp_flow_key k;
    std::memcpy(&k, it->first.data(), sizeof(k));
    DP_TRY(m.remove(k));
    it = plans_.erase(it);
  }
  for (auto& [kb, plan_of] : want) {
    auto it = plans_.find(kb);
    if (it != plans_.end() && it->second == plan_of) continue;
    dp_flow_key k;
    std::memcpy(&k, kb.data(), sizeof(k));
    dp_plan v{plan_of.first, ++plan_version_, plan_of.second};
    DP_TRY(m.update(k, v));
    plans_[kb] = plan_of;
  }
  return {};
}

Result<void> Datapath::note_join_listener(const IpAddr& addr, uint16_t port,
                                          std::optional<size_t> klass) {
  dp_listen_key k{};
  std::memcpy(k.addr, addr.bytes.data(), addr.family == AF_INET6 ? 16 : 4);
  k.port = port;
  k.proto = IPPROTO_TCP;
  k.family = static_cast<__u8>(addr.family);
  auto joins = skel_->dp_joins();
  if (!klass) {
    (void)joins.remove(k);  // none there already is fine
    return {};
  }
  if (*klass >= class_slot_.size() || class_slot_[*klass] < 0)
    return DP_SYS_ERROR(EINVAL, "a join listener for class {}, which the policy lacks", *klass);
  return joins.update(k, static_cast<uint32_t>(class_slot_[*klass]));
}

void Datapath::forget_join_listeners() {
  auto joins = skel_->dp_joins();
  for (const auto& k : joins.keys()) (void)joins.remove(k);
}

std::vector<FlowRow> Datapath::flows(size_t* total) const {
  auto flows = skel_->dp_flows();
  std::vector<FlowRow> rows;
  for (auto& [k, f] : flows.entries()) rows.push_back({k, f});
  *total = rows.size();
  return rows;
}

std::optional<size_t> Datapath::flow_class(const IpAddr& local, uint16_t lport,
                                           const IpAddr& remote, uint16_t rport) const {
  auto f = find_flow(local, lport, remote, rport);
  if (!f) return std::nullopt;
  for (size_t c = 0; c < class_slot_.size(); ++c)
    if (class_slot_[c] == f->cls) return c;
  return std::nullopt;
}

std::optional<size_t> Datapath::flow_path(const IpAddr& local, uint16_t lport, const IpAddr& remote,
                                          uint16_t rport) const {
  auto f = find_flow(local, lport, remote, rport);
  if (!f) return std::nullopt;
  for (size_t p = 0; p < rail_slot_.size(); ++p)
    if (rail_slot_[p] >= 0 && static_cast<uint32_t>(rail_slot_[p]) == f->rail) return p;
  return std::nullopt;
}

uint64_t Datapath::flow_bytes(const IpAddr& local, uint16_t lport, const IpAddr& remote,
                              uint16_t rport) const {
  auto f = find_flow(local, lport, remote, rport);
  return f ? f->bytes : 0;
}

std::optional<dp_flow> Datapath::find_flow(const IpAddr& local, uint16_t lport,
                                           const IpAddr& remote, uint16_t rport) const {
  auto flows = skel_->dp_flows();
  auto key_of = [](const IpAddr& s, uint16_t sp, const IpAddr& d, uint16_t dp) {
    dp_flow_key k{};  // IPv4 as v4-mapped IPv6, as the datapath keys it
    auto put = [](__u32* w, const IpAddr& a) {
      if (a.family == AF_INET6) {
        std::memcpy(w, a.bytes.data(), 16);
        return;
      }
      w[2] = htonl(0xffff);
      std::memcpy(&w[3], a.bytes.data(), 4);
    };
    put(k.saddr, s);
    put(k.daddr, d);
    k.sport = htons(sp);
    k.dport = htons(dp);
    k.proto = IPPROTO_TCP;
    return k;
  };
  for (const auto& k : {key_of(local, lport, remote, rport), key_of(remote, rport, local, lport)}) {
    dp_flow f{};
    if (flows.lookup(k, &f)) return f;
  }
  return std::nullopt;
}

}  // namespace dp
