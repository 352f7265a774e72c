// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/event_log.h"

#include <fmt/chrono.h>

#include <algorithm>

namespace dp {

void EventLog::set_keep(size_t keep) {
  keep_ = std::max<size_t>(keep, 1);
  while (events_.size() > keep_) events_.pop_front();
}

void EventLog::record(SchedulerEvent e) {
  if (!e.klass.empty()) ++switches_[{e.klass, e.kind}];
  events_.push_back({++seq_, std::chrono::system_clock::now(), std::move(e)});
  if (events_.size() > keep_) events_.pop_front();
}

json EventLog::to_json(const Policy& p, const Logged& le) {
  auto shares = [&](const Shares& s) {
    json j = json::object();
    for (size_t i = 0; i < s.size() && i < p.paths.size(); ++i) j[p.paths[i].name] = s[i] / 100.0;
    return j;
  };
  return {{"seq", le.seq},
          {"time", fmt::format("{:%Y-%m-%dT%H:%M:%S}",
                               fmt::localtime(std::chrono::system_clock::to_time_t(le.wall)))},
          {"mono_ns",
           std::chrono::duration_cast<std::chrono::nanoseconds>(le.e.t.time_since_epoch()).count()},
          {"class", le.e.klass.empty() ? json(nullptr) : json(le.e.klass)},
          {"path", le.e.path.empty() ? json(nullptr) : json(le.e.path)},
          {"kind", le.e.kind},
          {"before", shares(le.e.before)},
          {"after", shares(le.e.after)},
          {"reason", le.e.reason}};
}

json EventLog::render(const Policy& p, uint64_t since) const {
  json out = json::array();
  for (const auto& le : events_)
    if (le.seq > since) out.push_back(to_json(p, le));
  return {{"events", out}, {"last", seq_}};
}

json EventLog::newest_of(const Policy& p, std::string_view klass, size_t count) const {
  json out = json::array();
  for (auto it = events_.rbegin(); it != events_.rend() && out.size() < count; ++it)
    if (it->e.klass == klass) out.insert(out.begin(), to_json(p, *it));
  return out;
}

}  // namespace dp
