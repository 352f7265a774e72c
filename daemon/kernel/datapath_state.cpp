// SPDX-License-Identifier: Apache-2.0
// Datapath: the maps the daemon reads and writes between policy commits,
// every tick or on a command: rail health records, class decisions, the
// flowlet gap and cell settings, rail flags, policers and the counters.
#include "dualpath/kernel/datapath.h"

#include <algorithm>
#include <cmath>

namespace dp {

namespace {

RailState state_of(uint32_t v) {
  switch (v) {
    case DP_HEALTH_SUSPECT:
      return RailState::Suspect;
    case DP_HEALTH_DOWN:
      return RailState::Down;
    case DP_HEALTH_HOLDDOWN:
      return RailState::Holddown;
    case DP_HEALTH_RAMPING:
      return RailState::Ramping;
    case DP_HEALTH_DRAINED:
      return RailState::Drained;
    default:
      return RailState::Up;
  }
}

uint32_t encode_state(RailState s) {
  switch (s) {
    case RailState::Up:
      return DP_HEALTH_UP;
    case RailState::Suspect:
      return DP_HEALTH_SUSPECT;
    case RailState::Down:
      return DP_HEALTH_DOWN;
    case RailState::Holddown:
      return DP_HEALTH_HOLDDOWN;
    case RailState::Ramping:
      return DP_HEALTH_RAMPING;
    case RailState::Drained:
      return DP_HEALTH_DRAINED;
  }
  return DP_HEALTH_NONE;
}

}  // namespace

std::vector<std::optional<RailRecord>> Datapath::health_records(size_t classes) const {
  std::vector<std::optional<RailRecord>> out(rail_slot_.size());
  auto map = skel_->dp_health();
  for (size_t i = 0; i < rail_slot_.size(); ++i) {
    dp_rail_health h{};
    if (!map.lookup(static_cast<uint32_t>(rail_slot_[i]), &h) || h.state == DP_HEALTH_NONE)
      continue;
    RailRecord r{h.key, state_of(h.state), (h.flags & DP_HEALTH_F_BFD_SEEN) != 0, {}};
    r.former.assign(classes, 0);
    for (size_t c = 0; c < classes && c < class_slot_.size(); ++c)
      r.former[c] = h.former[class_slot_[c]] / double(DP_SHARE_SCALE);
    out[i] = std::move(r);
  }
  return out;
}

Result<void> Datapath::write_health(const std::vector<RailRecord>& records) {
  auto map = skel_->dp_health();
  for (size_t i = 0; i < records.size() && i < rail_slot_.size(); ++i) {
    dp_rail_health h{};
    h.state = encode_state(records[i].state);
    h.flags = records[i].bfd_seen ? DP_HEALTH_F_BFD_SEEN : 0;
    h.key = records[i].key;
    for (size_t c = 0; c < records[i].former.size() && c < class_slot_.size(); ++c)
      h.former[class_slot_[c]] = static_cast<__u16>(
          std::lround(std::clamp(records[i].former[c], 0.0, 1.0) * DP_SHARE_SCALE));
    DP_TRY(map.update(static_cast<uint32_t>(rail_slot_[i]), h));
  }
  return {};
}

Result<void> Datapath::write_decision(size_t klass, const Shares& shares, uint32_t flags) {
  auto slot = static_cast<uint32_t>(class_slot_.at(klass));
  dp_decision d{};
  for (size_t i = 0; i < shares.size() && i < rail_slot_.size(); ++i)
    d.share[static_cast<size_t>(rail_slot_[i])] = shares[i];
  d.flags = flags;
  d.version = ++decision_version_;
  return skel_->dp_decisions().update(slot, d);
}

Result<dp_decision> Datapath::decision(size_t klass) const {
  auto slot = static_cast<uint32_t>(class_slot_.at(klass));
  dp_decision d{};
  DP_TRY(skel_->dp_decisions().lookup(slot, &d));
  return d;
}

Result<void> Datapath::clear_operator_pin(size_t klass) {
  auto slot = static_cast<uint32_t>(class_slot_.at(klass));
  auto decisions = skel_->dp_decisions();
  dp_decision d{};
  DP_TRY(decisions.lookup(slot, &d));
  d.flags &= ~kOperatorPinned;
  d.version = ++decision_version_;
  return decisions.update(slot, d);
}

Result<void> Datapath::set_flowlet_gap(uint64_t ns) {
  uint32_t zero = 0;
  dp_config cfg{};
  auto m = skel_->dp_config();
  DP_TRY(m.lookup(zero, &cfg));
  cfg.flowlet_gap_ns = ns;
  DP_TRY(m.update(zero, cfg));
  flowlet_gap_ns_ = ns;
  return {};
}

Result<void> Datapath::write_cells(uint32_t shift, const std::vector<bool>& classes,
                                   const std::vector<uint32_t>& ns_per_kib, bool any_order,
                                   bool bursts) {
  dp_cell_cfg cc{};
  cc.cell_shift = bursts ? 0 : shift;
  cc.flags = (any_order ? DP_CELL_F_ANY_ORDER : 0) | (bursts ? DP_CELL_F_BURSTS : 0);
  for (size_t c = 0; c < classes.size() && c < class_slot_.size(); ++c)
    if (classes[c]) cc.class_mask |= 1u << class_slot_[c];
  for (size_t i = 0; i < ns_per_kib.size() && i < rail_slot_.size(); ++i)
    cc.ns_per_kib[static_cast<size_t>(rail_slot_[i])] = ns_per_kib[i];
  uint32_t zero = 0;
  return skel_->dp_cells().update(zero, cc);
}

Result<dp_cell_cfg> Datapath::cells() const {
  dp_cell_cfg cc{};
  uint32_t zero = 0;
  DP_TRY(skel_->dp_cells().lookup(zero, &cc));
  return cc;
}

Result<void> Datapath::set_rails_up(const std::vector<bool>& up) {
  if (rails_up_.empty() || up == rails_up_) return {};
  auto rails = skel_->dp_rails();
  for (size_t i = 0; i < up.size() && i < rail_slot_.size(); ++i) {
    auto slot = static_cast<uint32_t>(rail_slot_[i]);
    dp_rail r{};
    DP_TRY(rails.lookup(slot, &r));
    uint32_t flags = up[i] && (r.flags & DP_RAIL_F_ENABLED) ? r.flags | DP_RAIL_F_MP_UP
                                                            : r.flags & ~uint32_t{DP_RAIL_F_MP_UP};
    if (flags == r.flags) continue;
    r.flags = flags;
    DP_TRY(rails.update(slot, r));
  }
  rails_up_ = up;
  return {};
}

Result<void> Datapath::write_police(const std::vector<RailPolice>& rails) {
  std::vector<dp_police> want(DP_MAX_RAILS);
  for (size_t i = 0; i < rails.size() && i < rail_slot_.size(); ++i) {
    auto& w = want[static_cast<size_t>(rail_slot_[i])];
    if (!rails[i].rate_bps) continue;
    w.rate = rails[i].rate_bps / 8;
    w.burst = police_burst_bytes(rails[i].rate_bps);
    for (size_t c = 0; c < rails[i].policed.size() && c < class_slot_.size(); ++c)
      if (rails[i].policed[c]) w.classes |= 1u << class_slot_[c];
  }
  // the first write covers every slot: pins adopted from an earlier run may hold a policer
  bool first = police_.size() != want.size();
  if (first) police_.assign(want.size(), dp_police{});
  auto police = skel_->dp_police();
  for (uint32_t slot = 0; slot < want.size(); ++slot) {
    const auto& w = want[slot];
    auto& had = police_[slot];
    if (!first && w.rate == had.rate && w.burst == had.burst && w.classes == had.classes) continue;
    dp_police v = w;
    v.tokens = static_cast<__s64>(v.burst) * 1000000000;  // a new rate starts with a full bucket
    DP_TRY(police.update(slot, v));
    had = w;
  }
  return {};
}

std::vector<dp_police_drops> Datapath::police_drops() const {
  std::vector<dp_police_drops> out(rail_slot_.size());
  auto drops = skel_->dp_police_drops();
  for (size_t i = 0; i < rail_slot_.size(); ++i) {
    auto v = drops.lookup(static_cast<uint32_t>(rail_slot_[i]));
    if (!v) continue;
    for (const auto& cpu : *v) {
      out[i].packets += cpu.packets;
      out[i].bytes += cpu.bytes;
    }
  }
  return out;
}

void Datapath::read(CounterTable& counters, ExceptionTable& exceptions, TcpTable& tcp) const {
  auto cm = skel_->dp_counters();
  auto em = skel_->dp_exceptions();
  auto tm = skel_->dp_tcp();
  for (uint32_t r = 0; r < DP_MAX_RAILS; ++r) {
    for (uint32_t c = 0; c < DP_MAX_CLASSES; ++c) {
      uint32_t key = r * DP_MAX_CLASSES + c;
      if (auto v = cm.lookup(key)) counters[r][c] = sum_counters(*v);
    }
    for (uint32_t e = 0; e < DP_EXC_MAX; ++e) {
      uint32_t key = r * DP_EXC_MAX + e;
      auto v = em.lookup(key);
      if (!v) continue;
      uint64_t sum = 0;
      for (auto x : *v) sum += x;
      exceptions[r][e] = sum;
    }
  }
  for (uint32_t r = 0; r < DP_MAX_RAILS; ++r)
    for (uint32_t c = 0; c < DP_MAX_CLASSES; ++c) {
      uint32_t key = r * DP_MAX_CLASSES + c;
      if (auto v = tm.lookup(key)) tcp[r][c] = sum_tcp(*v);
    }
}

ConnectTable Datapath::connects() const {
  ConnectTable out{};
  auto m = skel_->dp_connects();
  for (uint32_t r = 0; r <= DP_MAX_RAILS; ++r)
    for (uint32_t c = 0; c < DP_MAX_CLASSES; ++c) {
      uint32_t key = r * DP_MAX_CLASSES + c;
      auto v = m.lookup(key);
      if (!v) continue;
      for (auto x : *v) out[r][c] += x;
    }
  return out;
}

std::array<uint64_t, DP_MAX_RAILS> Datapath::handovers() const {
  std::array<uint64_t, DP_MAX_RAILS> out{};
  auto m = skel_->dp_handovers();
  for (uint32_t r = 0; r < DP_MAX_RAILS; ++r) {
    auto v = m.lookup(r);
    if (v)
      for (auto x : *v) out[r] += x;
  }
  return out;
}

}  // namespace dp
