// SPDX-License-Identifier: Apache-2.0
#include "event_loop.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <spdlog/spdlog.h>

namespace dp {

void EventLoop::block_signals(std::initializer_list<int> signals) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : signals) sigaddset(&mask, s);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
}

EventLoop::EventLoop() : epoll_(epoll_create1(EPOLL_CLOEXEC)) {}

EventLoop::~EventLoop() = default;

void EventLoop::set_events(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT)
    epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void EventLoop::watch(int fd, Callback cb) {
  watched_[fd] = {std::move(cb), nullptr};
  set_events(fd, EPOLLIN);
}

void EventLoop::want_write(int fd, Callback on_write, bool read) {
  auto it = watched_.find(fd);
  if (it == watched_.end()) return;
  it->second.write = std::move(on_write);
  set_events(fd, EPOLLOUT | (read ? EPOLLIN : 0u));
}

void EventLoop::stop_write(int fd) {
  auto it = watched_.find(fd);
  if (it == watched_.end()) return;
  it->second.write = nullptr;
  set_events(fd, EPOLLIN);
}

void EventLoop::unwatch(int fd) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  watched_.erase(fd);
}

Result<void> EventLoop::on_signals(std::map<int, std::function<void(int)>> table) {
  sigset_t mask;
  sigemptyset(&mask);
  for (auto& [s, cb] : table) sigaddset(&mask, s);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal_fd_.reset(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd_.valid()) return DP_SYS_ERROR(errno, "creating a signalfd failed");
  signals_ = std::move(table);
  watch(signal_fd_.get(), [this] {
    signalfd_siginfo si{};
    while (::read(signal_fd_.get(), &si, sizeof(si)) == sizeof(si)) {
      auto it = signals_.find(static_cast<int>(si.ssi_signo));
      if (it != signals_.end()) it->second(static_cast<int>(si.ssi_signo));
    }
  });
  return {};
}

Result<EventLoop::TimerId> EventLoop::add_timer(Callback cb) {
  Fd t(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!t.valid()) return DP_SYS_ERROR(errno, "creating a timerfd failed");
  int fd = t.get();
  watch(fd, [fd, cb = std::move(cb)] {
    uint64_t expirations = 0;
    (void)!::read(fd, &expirations, sizeof(expirations));
    cb();
  });
  timers_.push_back(std::move(t));
  return static_cast<TimerId>(timers_.size() - 1);
}

Result<void> EventLoop::set_interval(TimerId id, std::chrono::nanoseconds interval) {
  auto ns = interval.count();
  itimerspec its{};
  its.it_interval.tv_sec = ns / 1'000'000'000;
  its.it_interval.tv_nsec = ns % 1'000'000'000;
  its.it_value = its.it_interval;
  if (timerfd_settime(timers_.at(static_cast<size_t>(id)).get(), 0, &its, nullptr) != 0)
    return DP_SYS_ERROR(errno, "setting a timer failed");
  return {};
}

void EventLoop::add_deadline(Deadline d) { deadlines_.push_back(std::move(d)); }

void EventLoop::after_wake(Callback cb) { after_wake_.push_back(std::move(cb)); }

int EventLoop::timeout_ms() const {
  std::optional<SchedClock::time_point> next;
  for (const auto& d : deadlines_)
    if (auto t = d(); t && (!next || *t < *next)) next = t;
  if (!next) return -1;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - SchedClock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

void EventLoop::run() {
  running_ = true;
  while (running_) {
    epoll_event evs[16];
    int n = epoll_wait(epoll_.get(), evs, 16, timeout_ms());
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      // a callback may unwatch this or another fd: look it up each time
      int fd = evs[i].data.fd;
      auto it = watched_.find(fd);
      if (it != watched_.end() && (evs[i].events & (EPOLLOUT | EPOLLERR)) && it->second.write) {
        Callback cb = it->second.write;
        cb();
        it = watched_.find(fd);
      }
      if (it != watched_.end() && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
          it->second.read) {
        Callback cb = it->second.read;
        cb();
      }
    }
    for (auto& cb : after_wake_) cb();
  }
}

}  // namespace dp
