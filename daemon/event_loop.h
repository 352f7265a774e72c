// SPDX-License-Identifier: Apache-2.0
// The daemon's one loop (FRR's event loop is the model): epoll over the fds
// that components register with a callback, a table of signals, periodic
// timers, and deadlines that components ask to be woken for. Components keep
// their own fds and handles; the loop only waits and dispatches.
#pragma once

#include <chrono>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <vector>

#include "dualpath/core/result.h"
#include "dualpath/core/scheduler.h"

namespace dp {

class EventLoop {
 public:
  using Callback = std::function<void()>;
  using Deadline = std::function<std::optional<SchedClock::time_point>()>;

  // Blocks `signals` in the calling thread, before any other thread exists:
  // threads inherit the mask, and a thread that did not block SIGHUP would
  // take it and terminate the process.
  static void block_signals(std::initializer_list<int> signals);

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // fd readable -> cb. The fd stays the caller's; unwatch() before closing it.
  void watch(int fd, Callback cb);
  // fd writable -> on_write, beside (or, with read false, instead of) its
  // readable callback: a peer whose replies are pending is not read.
  void want_write(int fd, Callback on_write, bool read);
  void stop_write(int fd);  // back to readable only
  void unwatch(int fd);
  // Signals read from a signalfd (they must have been blocked).
  Result<void> on_signals(std::map<int, std::function<void(int)>> table);
  // A periodic timer; set_interval() re-arms it.
  using TimerId = int;
  Result<TimerId> add_timer(Callback cb);
  Result<void> set_interval(TimerId id, std::chrono::nanoseconds interval);
  // The loop wakes by the earliest deadline (at most a second ahead) and,
  // after every wake-up, runs each after_wake callback.
  void add_deadline(Deadline d);
  void after_wake(Callback cb);

  void run();  // until stop()
  void stop() { running_ = false; }

 private:
  int timeout_ms() const;

  Fd epoll_;
  Fd signal_fd_;
  std::map<int, std::function<void(int)>> signals_;
  struct Watch {
    Callback read, write;
  };
  void set_events(int fd, uint32_t events);
  std::map<int, Watch> watched_;
  std::vector<Fd> timers_;
  std::vector<Deadline> deadlines_;
  std::vector<Callback> after_wake_;
  bool running_ = false;
};

}  // namespace dp
