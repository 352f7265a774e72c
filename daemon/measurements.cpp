// SPDX-License-Identifier: Apache-2.0
#include "measurements.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "dualpath/core/encode.h"

namespace dp {

Measurements::Measurements() : links_(std::make_unique<LinkStatsReader>()) {}

void Measurements::reset(const Policy& p) {
  measures_.clear();
  for (auto& ps : p.paths)
    measures_.emplace_back(ps.capacity_bps, p.scheduler.ewma_weight, p.measurement.window);
  disagreeing_.assign(p.paths.size(), false);
  discover_rdma_ports(p, false);
}

void Measurements::collect(const Policy& p, const Datapath& dp, uint64_t tick) {
  auto now = std::chrono::steady_clock::now();
  double dt = first_ ? 0 : std::chrono::duration<double>(now - last_).count();
  std::array<uint64_t, DP_MAX_RAILS> tx_before{}, rx_before{}, tx_after{}, rx_after{};
  for (size_t r = 0; r < DP_MAX_RAILS; ++r)
    for (size_t c = 0; c < DP_MAX_CLASSES; ++c) {
      tx_before[r] += counters_[r][c].tx_bytes;
      rx_before[r] += counters_[r][c].rx_bytes;
    }
  dp.read(counters_, exceptions_, tcp_);
  for (size_t r = 0; r < DP_MAX_RAILS; ++r) {
    for (size_t c = 0; c < DP_MAX_CLASSES; ++c) {
      tx_after[r] += counters_[r][c].tx_bytes;
      rx_after[r] += counters_[r][c].rx_bytes;
    }
    if (dt > 0) {
      tx_bps_[r] = static_cast<double>(tx_after[r] - tx_before[r]) * 8 / dt;
      rx_bps_[r] = static_cast<double>(rx_after[r] - rx_before[r]) * 8 / dt;
    }
  }
  measure_paths(p, dp, tick);
  last_ = now;
  first_ = false;
}

void Measurements::discover_rdma_ports(const Policy& p, bool quiet) {
  const std::string& root = p.measurement.rdma_sysfs;
  auto found = discover_rdma(root);
  if (!found) {
    spdlog::warn("RDMA discovery in {} failed: {}", root, found.error().what());
    return;
  }
  std::vector<RdmaPort> mine;
  for (auto& port : *found)
    for (auto& ps : p.paths)
      if (!port.netdev.empty() && port.netdev == ps.interface) mine.push_back(port);
  if (quiet && mine == rdma_ports_) return;
  rdma_ports_ = mine;
  if (found->empty())
    spdlog::info("no RDMA devices under {}: RoCE traffic, if any, is not counted", root);
  for (auto& port : *found) {
    bool used = std::find(mine.begin(), mine.end(), port) != mine.end();
    spdlog::info("RDMA device {} port {} (netdev {}){}", port.device, port.port,
                 port.netdev.empty() ? "none" : port.netdev,
                 used ? ": counted in its path's load" : ": not on a path, ignored");
  }
}

void Measurements::measure_paths(const Policy& p, const Datapath& dp, uint64_t tick) {
  auto now = Clock::now();
  if (tick % 100 == 99) discover_rdma_ports(p, true);  // devices come and go
  std::vector<std::optional<RdmaCounters>> rdma(p.paths.size());
  rdma_by_path_.assign(p.paths.size(), {});
  for (auto it = rdma_ports_.begin(); it != rdma_ports_.end();) {
    auto c = read_rdma_counters(p.measurement.rdma_sysfs, *it);
    if (!c) {
      spdlog::warn("RDMA device {} port {} disappeared: {}", it->device, it->port,
                   c.error().what());
      it = rdma_ports_.erase(it);
      continue;
    }
    for (size_t i = 0; i < p.paths.size(); ++i) {
      if (p.paths[i].interface != it->netdev) continue;
      if (!rdma[i]) rdma[i] = RdmaCounters{};
      add_rdma(*rdma[i], *c);
      rdma_by_path_[i].push_back(it->device + "/" + std::to_string(it->port));
    }
    ++it;
  }
  for (size_t i = 0; i < p.paths.size() && i < measures_.size(); ++i) {
    auto slot = dp.rail_slot(i);
    PathSnapshot s;
    s.t = now;
    for (size_t c = 0; c < DP_MAX_CLASSES; ++c) {
      s.dp_tx_bytes += counters_[slot][c].tx_bytes;
      s.dp_rx_bytes += counters_[slot][c].rx_bytes;
      add_tcp(s.tcp, tcp_[slot][c]);
    }
    for (size_t c = 0; c < p.classes.size(); ++c) {
      if (p.classes[c].kind != ClassKind::LatencySensitive) continue;
      const auto& h = tcp_[slot][dp.class_slot(c)].rtt_us;
      for (size_t b = 0; b < kHistBuckets; ++b) s.ls_rtt_us[b] += h[b];
    }
    if (!dp.present(i)) continue;
    auto link = links_->read(static_cast<int>(dp.rail_ifindex(i)));
    if (!link) {
      spdlog::debug("{}", link.error().what());
      continue;
    }
    s.link = *link;
    s.rdma = rdma[i];
    measures_[i].update(s);
    const auto& rec = measures_[i].reconciliation();
    if (!rec.agree && !disagreeing_[i])
      spdlog::warn("path {}: {}", p.paths[i].name, rec.explanation);
    else if (rec.agree && disagreeing_[i])
      spdlog::info("path {}: the datapath and the link agree again", p.paths[i].name);
    disagreeing_[i] = !rec.agree;
  }
}

TickInput Measurements::tick_input(const Policy& p, const Datapath& dp) const {
  TickInput in;
  in.now = SchedClock::now();
  for (size_t i = 0; i < p.paths.size(); ++i) {
    TickInput::Path r;
    if (i < measures_.size()) {
      r.utilisation = measures_[i].utilisation();
      r.tick_utilisation = measures_[i].tick_utilisation();
      if (auto q = measures_[i].ls_rtt_us(); q && q->samples >= 10) r.ls_rtt_p50_us = q->p50;
    }
    for (size_t c = 0; c < DP_MAX_CLASSES; ++c) add_tcp(r.tcp, tcp_[dp.rail_slot(i)][c]);
    in.rails.push_back(r);
  }
  for (size_t c = 0; c < p.classes.size(); ++c) {
    uint64_t tx = 0;
    std::vector<uint64_t> by_path, rx_by_path;
    for (int rs : dp.rail_slots()) {
      const dp_counters& k = counters_[static_cast<size_t>(rs)][dp.class_slot(c)];
      tx += k.tx_bytes;
      by_path.push_back(k.tx_bytes);
      rx_by_path.push_back(k.rx_bytes);
    }
    in.class_tx_bytes.push_back(tx);
    in.class_path_tx_bytes.push_back(std::move(by_path));
    in.class_path_rx_bytes.push_back(std::move(rx_by_path));
  }
  return in;
}

std::vector<std::optional<double>> Measurements::rtt_p50_us() const {
  std::vector<std::optional<double>> rtt;
  for (const auto& m : measures_) {
    auto q = m.has_sample() ? m.rtt_us() : std::nullopt;
    rtt.push_back(q && q->samples >= 10 ? std::optional<double>(q->p50) : std::nullopt);
  }
  return rtt;
}

}  // namespace dp
