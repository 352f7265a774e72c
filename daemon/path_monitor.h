// SPDX-License-Identifier: Apache-2.0
// What the rails themselves say: a BFD session per rail (RFC 5880/5881, its
// sockets and timers) and the carrier from rtnetlink link events. PathMonitor feeds
// both into the Controller's rail health and calls `changed` after each, so
// the daemon settles the consequences at once.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/bfd.h"
#include "dualpath/core/controller.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"
#include "dualpath/core/views.h"
#include "dualpath/kernel/bfd_io.h"
#include "dualpath/kernel/netlink.h"
#include "event_loop.h"

struct nl_sock;  // libnl

namespace dp {

class PathMonitor {
 public:
  PathMonitor(EventLoop& loop, Controller& controller, std::function<void()> changed);
  ~PathMonitor();
  PathMonitor(const PathMonitor&) = delete;
  PathMonitor& operator=(const PathMonitor&) = delete;

  // One BFD session per path of `next` that has a peer; a path whose key
  // (rail_key) and authentication are unchanged keeps its session. Paths no
  // longer named send AdminDown to their peers. `ifindex` maps link events to
  // paths; `auth` is read_auth()'s for next.
  void setup(const Policy& next, const std::vector<uint32_t>& ifindex, const bfd::Auth& auth = {});

  // The BFD authentication `h` asks for, its key read from bfd_auth_key_file:
  // a regular file of 1 to 20 bytes (a final newline is not part of the
  // key) that only its owner may read or write. The error says what is
  // wrong with the file and how to mend it; nothing is applied then.
  static Result<bfd::Auth> read_auth(const HealthSettings& h);
  // Carrier changes as they happen; where events were lost (ENOBUFS: a
  // churn of links, a daemon stopped), every rail's carrier is read again.
  Result<void> open_link_events();
  // RFC 5882 3.2: AdminDown, so the peers do not take our exit for a failure.
  void send_admin_down();

  // How many times link events were lost (ENOBUFS) and carrier read again:
  // the daemon checks policy routing at once when it grows.
  uint64_t overflows() const { return overflows_; }

  std::optional<BfdView> bfd(size_t path) const;
  // Whether an interface has carrier now (IFF_UP and IFF_RUNNING).
  static bool carrier_of(const std::string& ifname);

 private:
  struct Session {
    std::string key;
    std::unique_ptr<BfdEndpoint> io;
    std::optional<bfd::Session> bfd;
    uint64_t discarded = 0;
    std::string last_discard;
  };
  void on_readable(size_t path);
  void service();  // due transmissions and detection timers
  void transitions(size_t path);
  void reread_carrier(int error);  // after lost link events (a libnl error)
  std::optional<SchedClock::time_point> next_wakeup() const;

  EventLoop& loop_;
  Controller& controller_;
  std::function<void()> changed_;
  std::vector<std::string> names_;  // per policy path
  std::vector<uint32_t> ifindex_;   // per policy path
  std::vector<Session> sessions_;   // per policy path
  NlSocket link_events_;            // rtnetlink link events (carrier)
  uint64_t overflows_ = 0;
};

}  // namespace dp
