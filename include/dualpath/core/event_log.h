// SPDX-License-Identifier: Apache-2.0
// What dpctl events shows: the newest scheduler decisions, health
// transitions and policy reloads, numbered, with wall-clock and monotonic
// times; and how often each class was moved, by kind (for the metrics).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "dualpath/core/policy.h"
#include "dualpath/core/protocol.h"
#include "dualpath/core/scheduler.h"

namespace dp {

class EventLog {
 public:
  // How many of the newest events are kept (the policy's [events] keep); a
  // smaller number drops the oldest at once.
  void set_keep(size_t keep);
  size_t keep() const { return keep_; }
  // An event with a class is a move of that class and is counted.
  void record(SchedulerEvent e);
  // The events after `since` (an event number), shares named by `p`'s paths.
  json render(const Policy& p, uint64_t since) const;
  // The newest `count` events of class `klass`, oldest first, as render has them.
  json newest_of(const Policy& p, std::string_view klass, size_t count) const;
  uint64_t last() const { return seq_; }
  // (class, kind) -> moves
  const std::map<std::pair<std::string, std::string>, uint64_t>& switches() const {
    return switches_;
  }

 private:
  struct Logged {
    uint64_t seq;
    std::chrono::system_clock::time_point wall;
    SchedulerEvent e;
  };
  static json to_json(const Policy& p, const Logged& le);
  size_t keep_ = EventSettings{}.keep;
  std::deque<Logged> events_;  // the newest keep_
  uint64_t seq_ = 0;
  std::map<std::pair<std::string, std::string>, uint64_t> switches_;
};

}  // namespace dp
