// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/nccl_reports.h"

#include <algorithm>

namespace dp {

NcclReports::Process& NcclReports::process(pid_t pid, Clock::time_point now) {
  auto it = procs_.find(pid);
  if (it != procs_.end()) return it->second;
  if (procs_.size() >= kMaxProcesses) {
    auto oldest = std::min_element(procs_.begin(), procs_.end(), [](const auto& a, const auto& b) {
      return a.second.seen < b.second.seen;
    });
    procs_.erase(oldest);
  }
  Process& p = procs_[pid];
  p.seen = now;
  return p;
}

void NcclReports::report(pid_t pid, const std::string& name, const std::vector<Count>& counts,
                         Clock::time_point now, bool scheduled) {
  Process& p = process(pid, now);
  bool restarted = p.name != name && !p.name.empty();
  for (const auto& c : counts) {
    if (c.bytes < p.last[{c.klass, c.path}]) restarted = true;
  }
  if (restarted) {
    p.last.clear();
    p.rate.clear();
  }
  const std::chrono::duration<double> since = now - p.seen;
  // the interval these bytes were sent in (a first report: one kPaceMax)
  auto interval = p.last.empty() ? std::chrono::duration<double>(kPaceMax) : since;
  interval = std::clamp(interval, std::chrono::duration<double>(kPaceMin),
                        std::chrono::duration<double>(kPaceMax));
  p.name = name;
  p.seen = now;
  p.scheduled = scheduled;
  advance(now);  // what was due before these bytes arrived
  for (const auto& c : counts) {
    uint64_t& last = p.last[{c.klass, c.path}];
    uint64_t added = c.bytes - last;
    totals_[{c.klass, c.path}] += added;
    if (since.count() > 0 && !restarted)
      p.rate[{c.klass, c.path}] = static_cast<double>(added) / since.count();
    last = c.bytes;
    if (added == 0 || !scheduled) continue;
    Paced& q = paced_[{c.klass, c.path}];
    q.pending += static_cast<double>(added);
    // everything pending goes out over this process's interval (several
    // processes in one class: the newest report sets the pace)
    q.rate = q.pending / interval.count();
  }
}

void NcclReports::advance(Clock::time_point now) {
  if (advanced_ == Clock::time_point{} || now < advanced_) {
    advanced_ = now;
    return;
  }
  double dt = std::chrono::duration<double>(now - advanced_).count();
  advanced_ = now;
  for (auto& [key, q] : paced_) {
    double out = std::min(q.pending, q.rate * dt);
    q.released += out;
    q.pending -= out;
  }
}

uint64_t NcclReports::paced(const std::string& klass, const std::string& path) const {
  auto it = paced_.find({klass, path});
  if (it == paced_.end()) return 0;
  // (never above the total: floating error rounds down)
  return std::min(static_cast<uint64_t>(it->second.released), bytes(klass, path));
}

uint64_t NcclReports::bytes(const std::string& klass, const std::string& path) const {
  auto it = totals_.find({klass, path});
  return it == totals_.end() ? 0 : it->second;
}

size_t NcclReports::reporting(Clock::time_point now) const {
  return static_cast<size_t>(std::count_if(procs_.begin(), procs_.end(), [&](const auto& p) {
    return !p.second.last.empty() && now - p.second.seen <= kQuiet;
  }));
}

std::vector<NcclReports::ProcessView> NcclReports::processes(Clock::time_point now) const {
  std::vector<ProcessView> out;
  for (const auto& [pid, p] : procs_) {
    if (p.last.empty() || now - p.seen > kQuiet) continue;
    ProcessView v;
    v.pid = pid;
    v.name = p.name;
    v.scheduled = p.scheduled;
    v.since = now - p.seen;
    for (const auto& [key, bytes] : p.last) {
      auto r = p.rate.find(key);
      v.sent.push_back({key.first, key.second, bytes,
                        r == p.rate.end() ? std::nullopt : std::optional<double>(r->second)});
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace dp
