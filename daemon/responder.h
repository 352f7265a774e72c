// SPDX-License-Identifier: Apache-2.0
// The probe responder: what `dpctl validate --peer` and `dpctl probe` on
// another node measure against (protocol: dualpath/client/probe.h).
//
// One listener per rail and address family, on the rail's source address
// and port [responder] port + the rail's index, marked with the rail's
// fwmark so that handshake and replies return over the rail they measure;
// beside each, a UDP socket on the same address and port that echoes every
// datagram (up to 512 bytes) back to its sender: what dpctl validate sends
// to check a peer's UDP handover (a datagram to its rail-N address on rail
// M's port reaches the rail-M socket only through sk_lookup).
// It runs on its own thread, so that a throughput test never delays the
// daemon's loop (BFD, the tick). Limits, so that it cannot be used to load
// the node from outside: only addresses the policy routes to (or
// [responder] allow) are answered, at most max_sessions at a time, each at
// most max_duration, and each source address at a bounded rate of echoes
// and sessions; everything else is closed at once and counted.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/protocol.h"
#include "dualpath/core/rate_limit.h"
#include "dualpath/core/result.h"

namespace dp {

class Responder {
 public:
  Responder() = default;
  ~Responder();
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  // (Re)starts for `p`: stops what runs, then listens if p.responder.enable.
  // A listener that cannot be opened is reported and the others still run.
  Result<void> start(const Policy& p);
  void stop();

  json status() const;

  // Per source address: UDP echoes and sessions, a burst and then a steady
  // rate (dpctl probe takes 20 connects and a few sessions a rail, and
  // dpctl validate 3 echoes); a source past its rate is refused (counted
  // as refused_rate).
  static constexpr double kEchoBurst = 256, kEchoesPerSecond = 128;
  static constexpr double kSessionBurst = 256, kSessionsPerSecond = 64;
  static constexpr size_t kMaxSources = 4096;

 private:
  struct Listener {
    Fd fd;
    size_t path = 0;
    std::string where;  // "10.99.0.1:7862 (rail0)"
    bool udp = false;   // the UDP echo socket
  };
  struct Session {
    std::thread thread;
    std::atomic<bool> done{false};
    int fd = -1;
  };
  void accept_loop();
  void echo_udp(int fd);
  void serve(int fd, size_t path, Session* self);
  json hello_json(size_t path) const;
  void reap(bool all);

  Policy policy_;
  std::vector<Listener> listeners_;
  std::vector<std::string> errors_;
  Fd wake_;  // eventfd: stop()
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;  // sessions_ and the counters
  std::list<Session> sessions_;
  // Refused as busy: the refusal is sent and the connection half-closed, and
  // it is closed once the client's request is read (or after a second), so
  // that the request does not arrive at a closed socket, whose reset could
  // reach the client before the refusal. The accept thread's own.
  struct Closing {
    int fd = -1;
    std::chrono::steady_clock::time_point until;
  };
  std::vector<Closing> closing_;
  void drain_closing(bool all);
  uint64_t served_ = 0, refused_address_ = 0, refused_busy_ = 0, bad_requests_ = 0;
  uint64_t udp_echoed_ = 0, refused_rate_ = 0;
  using Source = std::pair<int, std::array<uint8_t, 16>>;  // family, address
  RateLimiter<Source> echo_rate_{kEchoBurst, kEchoesPerSecond, kMaxSources};
  RateLimiter<Source> session_rate_{kSessionBurst, kSessionsPerSecond, kMaxSources};
  bool udp_echo_ = false;  // a UDP echo socket opened (hello says so)
};

}  // namespace dp
