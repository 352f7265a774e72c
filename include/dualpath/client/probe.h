// SPDX-License-Identifier: Apache-2.0
// The probe protocol between `dpctl validate` / `dpctl probe` and the
// responder of a peer's dualpathd (daemon/responder.cpp), and its client side.
//
// A session is one TCP connection to the responder's port for a rail (the
// responder listens on [responder] port + the rail's index, on the rail's
// source addresses, with the rail's fwmark so that its replies take the same
// rail). The client sends one JSON line, the responder answers one JSON line
// ({"ok": true, ...} or {"ok": false, "error": ...}), then:
//   hello   nothing more: the reply names the node, its topology and rails
//   echo    the client sends `size`-byte messages, each echoed back
//   sink    the client sends for as long as it likes (up to the limit), then
//           shuts its side; the responder replies {"bytes", "seconds"}
//   source  the responder sends for `seconds` (up to the limit), then closes
// Every session ends at the responder's max_duration.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/protocol.h"
#include "dualpath/core/result.h"
#include "dualpath/core/sockaddr.h"

namespace dp::probe {

inline constexpr size_t kMaxRequestLine = 1024;
inline constexpr int kMaxEchoSize = 65536;

struct Request {
  std::string op;  // hello, echo, sink, source
  int size = 64;   // echo: bytes per message
  double seconds = 1;
};
// Parses and checks a request line; the error is the reply's "error".
Result<Request> parse_request(const std::string& line);

// Blocking I/O on a non-blocking socket, bounded by a deadline.
using Clock = std::chrono::steady_clock;
Result<void> write_all(int fd, const char* data, size_t len, Clock::time_point deadline);
Result<void> read_exact(int fd, char* data, size_t len, Clock::time_point deadline);
Result<std::string> read_line(int fd, Clock::time_point deadline);  // up to kMaxRequestLine
// Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error.
int wait_for(int fd, short events, Clock::time_point deadline);

// Where one measurement goes: a peer address and port, from a local source
// address with a socket mark (a path's fwmark: the path's routing table).
struct Target {
  IpAddr addr;
  uint16_t port = 0;
  std::optional<IpAddr> source;
  uint32_t mark = 0;
  int protocol = 0;  // socket()'s: 0 (TCP), or IPPROTO_MPTCP
};
std::string to_string(const Target& t);  // "10.99.0.2:7863 from 10.99.0.1 mark 0x101"

// A connected socket, or why it could not be made: "connect timed out" (no
// answer; errno ETIMEDOUT), "connect failed: Connection refused", ...
Result<Fd> connect_to(const Target& t, std::chrono::milliseconds timeout);

// Whether the peer answers MPTCP at t (t.protocol is taken as
// IPPROTO_MPTCP): the connection is made and greeted, and is MPTCP at both
// ends, not fallen back to TCP (TCP_IS_MPTCP). An error when this node cannot
// make an MPTCP socket or the connection fails.
Result<bool> answers_mptcp(Target t, std::chrono::milliseconds timeout);

// One request and its reply line (the reply's "ok": false is an Error, with
// code EAGAIN where the reply says "retry": a refusal that passes).
Result<json> exchange(const Fd& c, const json& request, std::chrono::milliseconds timeout);

// A connection whose request the responder accepted, and its reply. A
// "busy" responder, and one that refused this address for its rate
// ("rate"), is asked again until `timeout`.
struct Session {
  Fd fd;
  json reply;
};
Result<Session> open_session(const Target& t, const json& request,
                             std::chrono::milliseconds timeout);

// hello: the peer's node, topology and rails.
Result<json> hello(const Target& t, std::chrono::milliseconds timeout);

// `count` connects one after another: the time each took (ms), and how many
// got no answer within `timeout` (lost) or were refused.
struct ConnectStats {
  std::vector<double> ms;
  int lost = 0, refused = 0;
  std::string error;  // the last failure, if any
};
ConnectStats connects(const Target& t, int count, std::chrono::milliseconds timeout);

// `count` datagrams to t's UDP echo (the responder's UDP socket on the same
// address and port), one at a time from a socket connected from t.source
// with t.mark: how many came back (a connected socket takes them only from
// t's address and port), and how many were refused (ICMP unreachable).
struct UdpEchoStats {
  int answered = 0, refused = 0, lost = 0;
  std::string error;  // why no datagram could be sent, if so
};
UdpEchoStats udp_echoes(const Target& t, int count, std::chrono::milliseconds timeout);

// `count` round trips of `size` bytes on one connection: each one's time (us),
// and the connection's retransmitted segments (tcp_info) at the end.
struct EchoStats {
  std::vector<double> us;
  uint32_t retransmits = 0;
};
Result<EchoStats> echo(const Target& t, int count, int size, std::chrono::milliseconds interval);

// Throughput with `streams` connections for `seconds`: upload (we send, the
// peer counts) or download (the peer sends, we count). Bits per second.
Result<double> throughput(const Target& t, bool upload, int streams, double seconds);

struct Percentiles {
  size_t n = 0;
  double p50 = 0, p95 = 0, p99 = 0, min = 0, max = 0;
};
Percentiles percentiles(std::vector<double> v);  // nearest rank
json to_json(const Percentiles& p);

}  // namespace dp::probe
