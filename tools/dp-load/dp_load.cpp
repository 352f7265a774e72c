// SPDX-License-Identifier: Apache-2.0
// dp-load: the MoE workload generator. A server on one node, a client on the
// other; traffic per class on that class's ports (the lab policies' ranges):
//   moe    - D dispatch connections (client -> server) and C combine
//            connections (server -> client), long-lived; each step sends a
//            burst on every dispatch connection, the server answers with a
//            burst on every combine connection once it has all of the
//            dispatch, and the step ends when the client has every combine
//            byte. Closed loop (--concurrency steps in flight, --gap between
//            steps) or open loop (--rate steps per second).
//   rpc    - small request/response on the control port at a fixed rate.
//   stream - logs at a constant rate (logs), and param-sync (sync): transfers
//            of --sync-size every --sync-every, or --sync-streams continuous
//            connections that write for the whole run.
// Every message is checksummed (FNV-1a 64) and its payload is known to the
// receiver (deterministic from seed, connection and step): corruption, loss
// and reordering of data are counted as errors, as are connection failures.
//
//   dp-load server [--bind ADDR] [--mptcp] [--once] [--json FILE]
//   dp-load client --connect ADDR [--workload moe,rpc,stream] [--duration 10s] ...
//                  (stream is logs and sync; either may be named alone)
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "dualpath/core/mptcp_sockopt.h"
#include "dualpath/core/units.h"
#include "dualpath/version.h"
#include "load_core.h"

using namespace dpload;
using Clock = std::chrono::steady_clock;

namespace {

struct Ports {
  uint16_t dispatch = 50000, combine = 51000, sync = 52000, control = 53000, logs = 54000;
  uint16_t of(Kind k, uint16_t index) const {
    switch (k) {
      case Kind::Dispatch:
        return static_cast<uint16_t>(dispatch + index);
      case Kind::Combine:
        return static_cast<uint16_t>(combine + index);
      case Kind::Rpc:
        return control;
      case Kind::Logs:
        return logs;
      case Kind::Sync:
        return sync;
    }
    return 0;
  }
};

std::atomic<bool> g_stop{false};

// ---------------------------------------------------------------- sockets

bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// false on EOF or error; `eof` tells which
bool read_all(int fd, uint8_t* p, size_t n, bool* eof = nullptr) {
  while (n) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (eof) *eof = r == 0;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct Addr {
  sockaddr_storage ss{};
  socklen_t len = 0;
};

std::optional<Addr> resolve(const std::string& host, uint16_t port) {
  Addr a;
  auto* in = reinterpret_cast<sockaddr_in*>(&a.ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
  if (inet_pton(AF_INET, host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    a.len = sizeof(*in);
  } else if (inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    a.len = sizeof(*in6);
  } else {
    return std::nullopt;
  }
  return a;
}

// A socket's congestion control (TCP_CONGESTION); "" keeps the netns default.
// Per socket because a network namespace other than the first can default
// only to what tcp_allowed_congestion_control lists.
bool set_congestion_control(int fd, const std::string& cc) {
  return cc.empty() || setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(),
                                  static_cast<socklen_t>(cc.size())) == 0;
}

// Refuses an unknown congestion control before any connection is made.
bool congestion_control_usable(const std::string& cc) {
  if (cc.empty()) return true;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
  bool ok = fd >= 0 && set_congestion_control(fd, cc);
  int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) {
    std::string avail;
    if (FILE* f = std::fopen("/proc/sys/net/ipv4/tcp_available_congestion_control", "r")) {
      char buf[256] = {};
      if (std::fgets(buf, sizeof(buf), f)) avail = buf;
      std::fclose(f);
      while (!avail.empty() && avail.back() == '\n') avail.pop_back();
    }
    std::fprintf(stderr, "dp-load: congestion control '%s': %s (this kernel has: %s)\n", cc.c_str(),
                 err == ENOENT ? "not in this kernel" : std::strerror(err),
                 avail.empty() ? "?" : avail.c_str());
  }
  return ok;
}

int tcp_socket(int family, bool mptcp, const std::string& cc) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, mptcp ? IPPROTO_MPTCP : IPPROTO_TCP);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  set_congestion_control(fd, cc);
  timeval tv{30, 0};  // a connection stalled this long counts as broken
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

// ---------------------------------------------------------------- messages

struct Counters {
  std::atomic<uint64_t> messages{0}, bytes_sent{0}, bytes_received{0}, checksum_errors{0},
      connection_errors{0};
  json to_json() const {
    return {{"messages", messages.load()},
            {"bytes_sent", bytes_sent.load()},
            {"bytes_received", bytes_received.load()},
            {"checksum_errors", checksum_errors.load()},
            {"connection_errors", connection_errors.load()}};
  }
};

// The payload of (seed, conn, step) at p, then its checksum (big-endian):
// len + kTrailerSize bytes.
void put_payload(uint8_t* p, uint32_t len, uint64_t seed, uint32_t conn, uint64_t step) {
  fill_payload(p, len, seed, conn, step);
  Fnv64 f;
  f.add(p, len);
  uint64_t sum = f.value();
  for (int i = 0; i < 8; ++i)
    p[len + static_cast<size_t>(i)] = static_cast<uint8_t>(sum >> (56 - 8 * i));
}

bool send_msg(int fd, uint64_t seed, uint32_t conn, uint64_t step, uint32_t len,
              std::vector<uint8_t>& buf, Counters& c) {
  MsgHeader h{step, len, conn};
  auto hb = encode(h);
  buf.resize(len + kTrailerSize);
  put_payload(buf.data(), len, seed, conn, step);
  if (!write_all(fd, hb.data(), hb.size()) || !write_all(fd, buf.data(), buf.size())) return false;
  c.bytes_sent += len;
  return true;
}

// A message that failed its check, said on stderr (the first 8 of a
// process): which connection, where in its stream, and what was read, so
// that a run's lost or altered bytes can be told from a framing error.
// false: not said (enough were).
bool say_bad_message(int fd, const char* what, const uint8_t* bytes, size_t n,
                     std::optional<MsgHeader> h, uint64_t stream_offset) {
  static std::atomic<int> said{0};
  if (said++ >= 8) return false;
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof(local), pl = sizeof(peer);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll);
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl);
  auto port = [](const sockaddr_storage& ss) {
    return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(ss).sin6_port
                                          : reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  };
  int is_mptcp = 0;
  socklen_t il = sizeof(is_mptcp);
  ::getsockopt(fd, SOL_TCP, dp::mptcp::kTcpIsMptcp, &is_mptcp, &il);
  std::string hex;
  for (size_t i = 0; i < n && i < 24; ++i) hex += fmt::format("{:02x}", bytes[i]);
  std::fprintf(
      stderr, "dp-load: %s: local port %u, peer port %u%s, at byte %llu of the stream%s: %s\n",
      what, port(local), port(peer), is_mptcp ? " (MPTCP)" : "",
      static_cast<unsigned long long>(stream_offset),
      h ? fmt::format(", connection {:#x} step {} length {}", h->conn, h->step, h->len).c_str()
        : "",
      hex.c_str());
  return true;
}

// Where a message's payload differs from what its sender had to send: the
// first and last bytes that differ, how many do, and where in the payload
// the bytes read at the first one belong (altered in place, or a piece of
// the stream delivered at the wrong place), said on stderr.
void say_damage(const uint8_t* got, size_t len, uint64_t seed, const MsgHeader& h) {
  std::vector<uint8_t> want(len);
  fill_payload(want.data(), len, seed, h.conn, h.step);
  size_t first = len, last = 0, differ = 0;
  for (size_t i = 0; i < len; ++i)
    if (got[i] != want[i]) {
      first = std::min(first, i);
      last = i;
      ++differ;
    }
  if (differ == 0) return;
  std::string from = "nowhere in this message";
  const size_t probe = std::min<size_t>(32, len - first);
  if (auto* at = static_cast<const uint8_t*>(::memmem(want.data(), len, got + first, probe)))
    from = fmt::format("byte {} of this message's payload", at - want.data());
  std::fprintf(stderr,
               "dp-load:   payload bytes %zu..%zu differ (%zu of them); what was read at %zu "
               "belongs at %s\n",
               first, last, differ, first, from.c_str());
}

// Reads one message; verifies its checksum and that it is the payload the
// sender had to send. Returns the header, or nullopt on EOF/error.
// `offset`, when given, counts the connection's bytes read (for the report
// of a bad message).
std::optional<MsgHeader> recv_msg(int fd, uint64_t seed, std::vector<uint8_t>& buf, Counters& c,
                                  bool* eof, uint64_t* offset = nullptr) {
  uint64_t none = 0;
  uint64_t& at = offset ? *offset : none;
  uint8_t hb[kHeaderSize];
  if (!read_all(fd, hb, sizeof(hb), eof)) return std::nullopt;
  auto h = decode_header(hb);
  if (!h || h->len > (256u << 20)) {
    ++c.checksum_errors;
    (void)say_bad_message(fd, "not a message header", hb, sizeof(hb), std::nullopt, at);
    return std::nullopt;
  }
  at += sizeof(hb);
  buf.resize(h->len + kTrailerSize);
  if (!read_all(fd, buf.data(), buf.size(), eof)) return std::nullopt;
  Fnv64 f;
  f.add(buf.data(), h->len);
  uint64_t trailer = 0;
  for (size_t i = 0; i < 8; ++i) trailer = trailer << 8 | buf[h->len + i];
  if (f.value() != trailer || !payload_matches(buf.data(), h->len, seed, h->conn, h->step)) {
    ++c.checksum_errors;
    if (say_bad_message(fd, f.value() != trailer ? "a message's checksum" : "a message's payload",
                        buf.data(), buf.size(), h, at))
      say_damage(buf.data(), h->len, seed, *h);
  }
  at += buf.size();
  c.bytes_received += h->len;
  ++c.messages;
  return h;
}

uint32_t conn_id(Kind k, uint16_t i) { return uint32_t(static_cast<uint8_t>(k)) << 16 | i; }

// ---------------------------------------------------------------- server

struct ServerOpts {
  std::string bind = "::";
  bool mptcp = false, once = false;
  std::string json_file;
  std::string congestion_control;  // "": the netns default
  uint16_t max_conns = 64;
  Ports ports;
};

// Per session: which steps have all their dispatch, and the combine queues.
struct ServerSession {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, uint32_t> dispatch_done;  // step -> dispatch messages received
  // step -> bytes each dispatch connection brought: combine connection j
  // answers with what dispatch connection j % D brought (an expert's output
  // is as large as its input)
  std::map<uint64_t, std::vector<uint32_t>> dispatch_len;
  std::vector<std::deque<std::pair<uint64_t, uint32_t>>> combine_q;  // per combine conn
  bool closing = false;
};

int run_server(const ServerOpts& o) {
  std::vector<int> listeners;
  auto listen_on = [&](uint16_t port) {
    auto a = resolve(o.bind, port);
    if (!a) return false;
    int fd = tcp_socket(a->ss.ss_family, o.mptcp, o.congestion_control);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (a->ss.ss_family == AF_INET6) {
      int zero = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a->ss), a->len) < 0 ||
        ::listen(fd, 64) < 0) {
      std::fprintf(stderr, "dp-load server: cannot listen on %s port %u: %s\n", o.bind.c_str(),
                   port, std::strerror(errno));
      return false;
    }
    listeners.push_back(fd);
    return true;
  };
  const uint16_t n = o.max_conns;
  for (uint16_t i = 0; i < n; ++i)
    if (!listen_on(o.ports.of(Kind::Dispatch, i)) || !listen_on(o.ports.of(Kind::Combine, i)))
      return 1;
  for (Kind k : {Kind::Rpc, Kind::Logs, Kind::Sync})
    if (!listen_on(o.ports.of(k, 0))) return 1;
  std::fprintf(stderr, "dp-load server: listening on %s (%zu ports)\n", o.bind.c_str(),
               listeners.size());
  std::printf("ready\n");
  std::fflush(stdout);

  Counters c;
  auto session = std::make_shared<ServerSession>();
  std::atomic<int> live{0};
  std::atomic<bool> had_client{false};
  std::vector<std::thread> threads;
  std::vector<pollfd> pfds;
  for (int fd : listeners) pfds.push_back({fd, POLLIN, 0});
  while (!g_stop) {
    if (o.once && had_client && live == 0) break;
    int r = ::poll(pfds.data(), pfds.size(), 200);
    if (r <= 0) continue;
    for (auto& p : pfds) {
      if (!(p.revents & POLLIN)) continue;
      int fd = ::accept4(p.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      timeval tv{30, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      set_congestion_control(fd, o.congestion_control);
      had_client = true;
      ++live;
      threads.emplace_back([fd, &c, &live, session] {
        uint8_t hb[kHelloSize];
        std::optional<Hello> h;
        if (read_all(fd, hb, sizeof(hb))) h = decode_hello(hb);
        std::vector<uint8_t> buf;
        bool eof = false;
        if (!h) {
          ++c.connection_errors;
        } else if (h->kind == Kind::Combine) {
          {
            std::lock_guard<std::mutex> lk(session->mu);
            if (session->combine_q.size() < h->combine) session->combine_q.resize(h->combine);
          }
          // writes a combine burst for each step whose dispatch is complete
          for (;;) {
            std::pair<uint64_t, uint32_t> job;
            {
              std::unique_lock<std::mutex> lk(session->mu);
              auto& q = session->combine_q[h->index];
              // the client closes its combine connections last: a read of 0
              // bytes (checked below with poll) ends this writer
              session->cv.wait_for(lk, std::chrono::milliseconds(100),
                                   [&] { return !q.empty() || session->closing; });
              if (q.empty()) {
                pollfd pf{fd, POLLIN, 0};
                char x;
                if (::poll(&pf, 1, 0) == 1 && ::recv(fd, &x, 1, MSG_PEEK) <= 0) break;
                continue;
              }
              job = q.front();
              q.pop_front();
            }
            if (!send_msg(fd, h->seed, conn_id(Kind::Combine, h->index), job.first, job.second, buf,
                          c)) {
              ++c.connection_errors;
              break;
            }
          }
        } else {
          uint64_t offset = 0;
          for (;;) {
            auto m = recv_msg(fd, h->seed, buf, c, &eof, &offset);
            if (!m) {
              if (!eof) ++c.connection_errors;
              break;
            }
            if (h->kind == Kind::Rpc) {
              if (!send_msg(fd, h->seed, conn_id(Kind::Rpc, 1), m->step, m->len, buf, c)) {
                ++c.connection_errors;
                break;
              }
            } else if (h->kind == Kind::Dispatch) {
              std::lock_guard<std::mutex> lk(session->mu);
              auto& lens = session->dispatch_len[m->step];
              lens.resize(std::max<size_t>(h->dispatch, 1), 0);
              if (h->index < lens.size()) lens[h->index] = m->len;
              if (++session->dispatch_done[m->step] == h->dispatch) {
                session->dispatch_done.erase(m->step);
                if (session->combine_q.size() < h->combine) session->combine_q.resize(h->combine);
                for (size_t j = 0; j < session->combine_q.size(); ++j)
                  session->combine_q[j].push_back({m->step, lens[j % lens.size()]});
                session->dispatch_len.erase(m->step);
                session->cv.notify_all();
              }
            }
          }
        }
        ::close(fd);
        --live;
      });
    }
  }
  g_stop = true;
  for (auto& t : threads) t.join();
  for (int fd : listeners) ::close(fd);
  json out = {{"role", "server"}, {"counters", c.to_json()}};
  if (!o.json_file.empty()) std::ofstream(o.json_file) << out.dump(1) << "\n";
  std::fprintf(stderr, "dp-load server: %s\n", out.dump().c_str());
  return 0;
}

// ---------------------------------------------------------------- client

struct ClientOpts {
  std::string connect;
  std::string congestion_control;  // "": the netns default
  bool mptcp = false;
  bool moe = true, rpc = true, logs = true, sync = true;
  double duration_s = 10;
  uint16_t dispatch = 4, combine = 4;
  uint32_t burst = 1 << 20;
  double gap_s = 0;
  int concurrency = 1;
  double rate = 0;  // steps/s, open loop when > 0
  double rpc_rate = 500;
  uint32_t rpc_size = 256;
  double logs_bps = 20e6;
  uint32_t sync_size = 8 << 20;
  double sync_every_s = 1;
  uint16_t sync_streams = 0;  // continuous param-sync connections (0: periodic transfers)
  double sync_on_s = 0, sync_off_s = 0;  // param-sync in phases: on, then off (off 0: always)
  double skew = 0;                       // expert popularity (0: every connection alike)
  double skew_shift_s = 2;               // the hottest expert changes this often
  uint64_t seed = 1;
  std::string json_file;
  std::string steps_file;     // one JSON line per completed MoE step
  bool count_warmup = false;  // the warm-up steps in the step times too
  bool quiet = false;
  Ports ports;
};

int connect_to(const ClientOpts& o, Kind k, uint16_t index, Counters& c) {
  auto a = resolve(o.connect, o.ports.of(k, index));
  if (!a) return -1;
  int fd = tcp_socket(a->ss.ss_family, o.mptcp, o.congestion_control);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a->ss), a->len) < 0) {
    std::fprintf(stderr, "dp-load: connecting to %s port %u: %s\n", o.connect.c_str(),
                 o.ports.of(k, index), std::strerror(errno));
    ++c.connection_errors;
    if (fd >= 0) ::close(fd);
    return -1;
  }
  Hello h{k, index, o.dispatch, o.combine, o.seed};
  auto hb = encode(h);
  if (!write_all(fd, hb.data(), hb.size())) {
    ++c.connection_errors;
    ::close(fd);
    return -1;
  }
  return fd;
}

// What every workload of a client run shares: its options, its counters, and
// when it began and must end.
struct Run {
  const ClientOpts& o;
  Counters& c;
  Clock::time_point t0, end;
  bool over() const { return Clock::now() >= end || g_stop; }
};

// One kind of the client's traffic (--workload): it makes its connections,
// starts its threads, runs until the run's end, stops, and says what it did.
class Workload {
 public:
  virtual ~Workload() = default;
  // Its connections; false when one cannot be made (the run fails).
  virtual bool connect(Run&) { return true; }
  virtual void start(Run& r, std::vector<std::thread>& threads) = 0;
  // The foreground part, if any (the MoE step driver); returns when done.
  virtual void drive(Run&) {}
  // After drive(): ends what start() began, before the threads are joined.
  virtual void stop() {}
  // After the threads are joined.
  virtual void joined() {}
  virtual void report(json& out, double elapsed) const = 0;
  // Errors of its own beyond the shared counters (steps that never finished).
  virtual uint64_t failures() const { return 0; }
};

// moe: D dispatch connections (client -> server) and C combine connections
// (server -> client); a step is a burst on every dispatch connection and the
// server's answer on every combine connection.
class Moe : public Workload {
 public:
  bool connect(Run& r) override {
    for (uint16_t i = 0; i < r.o.dispatch; ++i)
      dfd_.push_back(connect_to(r.o, Kind::Dispatch, i, r.c));
    for (uint16_t i = 0; i < r.o.combine; ++i)
      cfd_.push_back(connect_to(r.o, Kind::Combine, i, r.c));
    for (int fd : dfd_)
      if (fd < 0) return false;
    for (int fd : cfd_)
      if (fd < 0) return false;
    for (size_t i = 0; i < dfd_.size(); ++i) queues_.push_back(std::make_unique<Queue>());
    return true;
  }

  void start(Run& r, std::vector<std::thread>& threads) override {
    for (size_t i = 0; i < dfd_.size(); ++i)  // dispatch writers
      threads.emplace_back([this, &r, i] { write_dispatch(r, i); });
    for (size_t i = 0; i < cfd_.size(); ++i)  // combine readers
      threads.emplace_back([this, &r, i] { read_combine(r, i); });
  }

  // The step driver: open loop at --rate, or closed loop with
  // --concurrency steps in flight (and --gap between them).
  void drive(Run& r) override {
    const ClientOpts& o = r.o;
    uint64_t step = 0;
    if (o.rate > 0) {
      auto period = std::chrono::duration<double>(1.0 / o.rate);
      for (auto next = Clock::now(); next < r.end && !g_stop;
           next += std::chrono::duration_cast<Clock::duration>(period)) {
        std::this_thread::sleep_until(next);
        std::unique_lock<std::mutex> lk(mu_);
        if (open_.size() >= 256) continue;  // shed load rather than grow without bound
        lk.unlock();
        start_step(r, step++);
      }
    } else {
      while (!r.over()) {
        {
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait_until(lk, r.end, [&] {
            return open_.size() < static_cast<size_t>(std::max(1, o.concurrency));
          });
          if (Clock::now() >= r.end) break;
        }
        start_step(r, step++);
        if (o.gap_s > 0 && o.concurrency <= 1) {
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait_until(lk, r.end, [&] { return open_.empty(); });
          lk.unlock();
          std::this_thread::sleep_for(std::chrono::duration<double>(o.gap_s));
        }
      }
    }
    // the steps in flight finish (or stall: they then count as failed)
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(20), [&] { return open_.empty(); });
  }

  void stop() override {
    done_ = true;
    for (auto& q : queues_) q->cv.notify_all();
    for (int fd : dfd_) ::shutdown(fd, SHUT_RDWR);
    for (int fd : cfd_) ::shutdown(fd, SHUT_RDWR);
  }

  // steps still open now never finished; the stall lasts until now
  void joined() override {
    failed_ = open_.size();
    if (failed_)
      longest_stall_s_ = std::max(
          longest_stall_s_, std::chrono::duration<double>(Clock::now() - last_completion_).count());
  }

  ~Moe() override {
    for (int fd : dfd_)
      if (fd >= 0) ::close(fd);
    for (int fd : cfd_)
      if (fd >= 0) ::close(fd);
  }

  void report(json& out, double elapsed) const override {
    out["steps"] = {
        {"started", started_},
        {"completed", completed_},
        {"failed", failed_},
        {"longest_stall_s", longest_stall_s_},
        {"time_ms", step_ns_.summary(1e6)},
        {"warmup", {{"steps", warmup_ms_.size()}, {"counted", count_warmup_}, {"ms", warmup_ms_}}}};
    out["goodput_bps"] = static_cast<double>(bytes_done_) * 8 / std::max(elapsed, 1e-9);
  }
  uint64_t failures() const override { return failed_; }
  // --steps: each completed step as a JSON line (trace_step)
  void trace_to(std::ostream* out) { steps_ = out; }
  void count_warmup(bool yes) { count_warmup_ = yes; }

 private:
  struct Queue {  // a dispatch connection's steps to send: step, bytes
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<uint64_t, uint32_t>> jobs;
  };
  struct Open {
    Clock::time_point start;
    uint32_t combines = 0;           // combine messages received
    uint64_t bytes = 0;              // dispatch and combine bytes the step moves
    uint64_t phase = 0;              // which expert was the hottest (--skew-shift periods)
    std::vector<double> combine_ms;  // per combine connection: when its message arrived
    bool warmup = false;             // started before any step had finished
  };

  void write_dispatch(Run& r, size_t i) {
    std::vector<uint8_t> buf;
    Queue& q = *queues_[i];
    for (;;) {
      std::pair<uint64_t, uint32_t> job;
      {
        std::unique_lock<std::mutex> lk(q.mu);
        q.cv.wait(lk, [&] { return !q.jobs.empty() || done_; });
        if (q.jobs.empty()) break;
        job = q.jobs.front();
        q.jobs.pop_front();
      }
      if (!send_msg(dfd_[i], r.o.seed, conn_id(Kind::Dispatch, static_cast<uint16_t>(i)), job.first,
                    job.second, buf, r.c)) {
        ++r.c.connection_errors;
        break;
      }
    }
  }

  void read_combine(Run& r, size_t i) {
    std::vector<uint8_t> buf;
    bool eof = false;
    uint64_t offset = 0;
    for (;;) {
      auto m = recv_msg(cfd_[i], r.o.seed, buf, r.c, &eof, &offset);
      if (!m) {
        if (!eof) ++r.c.connection_errors;
        break;
      }
      std::lock_guard<std::mutex> lk(mu_);
      auto it = open_.find(m->step);
      if (it == open_.end()) continue;
      auto& step = it->second;
      if (steps_ && i < step.combine_ms.size())
        step.combine_ms[i] =
            std::chrono::duration<double, std::milli>(Clock::now() - step.start).count();
      if (++step.combines == r.o.combine) {
        auto now = Clock::now();
        if (steps_) trace_step(r, m->step, step, now);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - step.start);
        if (step.warmup) warmup_ms_.push_back(static_cast<double>(ns.count()) / 1e6);
        if (!step.warmup || count_warmup_) step_ns_.record(static_cast<uint64_t>(ns.count()));
        bytes_done_ += step.bytes;
        longest_stall_s_ = std::max(longest_stall_s_,
                                    std::chrono::duration<double>(now - last_completion_).count());
        last_completion_ = now;
        open_.erase(it);
        ++completed_;
        cv_.notify_all();
      }
    }
  }

  void start_step(Run& r, uint64_t step) {
    auto now = Clock::now();
    auto phase = static_cast<uint64_t>(std::chrono::duration<double>(now - r.t0).count() /
                                       std::max(r.o.skew_shift_s, 1e-3));
    auto sizes = skewed_sizes(uint64_t{r.o.burst} * dfd_.size(), dfd_.size(), r.o.skew, phase);
    uint64_t bytes = 0;
    for (auto v : sizes) bytes += v;
    for (size_t j = 0; j < cfd_.size(); ++j) bytes += sizes[j % sizes.size()];
    {
      std::lock_guard<std::mutex> lk(mu_);
      // A step started before any has finished runs on connections that
      // have carried nothing yet, in slow start, beside the other steps of
      // the first instant: it measures the connections' start, not the
      // paths. Its time is kept apart from the steady steps'.
      open_[step] = {now,
                     0,
                     bytes,
                     phase,
                     std::vector<double>(steps_ ? cfd_.size() : 0, 0.0),
                     completed_ == 0};
      ++started_;
    }
    for (size_t i = 0; i < dfd_.size(); ++i) {
      std::lock_guard<std::mutex> lk(queues_[i]->mu);
      queues_[i]->jobs.push_back({step, sizes[i]});
      queues_[i]->cv.notify_one();
    }
  }

  // --steps: the step, when it began (s into the run), the hottest expert's
  // period, how long it took and when each combine connection's answer came
  // (ms into the step): a slow step says which connection held it back.
  void trace_step(Run& r, uint64_t n, const Open& s, Clock::time_point now) {
    json line = {{"step", n},
                 {"start_s", std::chrono::duration<double>(s.start - r.t0).count()},
                 {"phase", s.phase},
                 {"ms", std::chrono::duration<double, std::milli>(now - s.start).count()},
                 {"combine_ms", s.combine_ms}};
    if (s.warmup) line["warmup"] = true;
    *steps_ << line.dump() << "\n";
  }

  std::ostream* steps_ = nullptr;
  std::vector<int> dfd_, cfd_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Open> open_;
  uint64_t bytes_done_ = 0;        // of completed steps
  Histogram step_ns_;              // every step's time but the warm-up's (unless counted)
  std::vector<double> warmup_ms_;  // the warm-up steps' times
  bool count_warmup_ = false;
  uint64_t started_ = 0, completed_ = 0, failed_ = 0;
  double longest_stall_s_ = 0;
  Clock::time_point last_completion_ = Clock::now();
};

// rpc: small requests on the control port at a fixed rate, each answered.
class Rpc : public Workload {
 public:
  void start(Run& r, std::vector<std::thread>& threads) override {
    threads.emplace_back([this, &r] {
      int fd = connect_to(r.o, Kind::Rpc, 0, r.c);
      if (fd < 0) return;
      std::vector<uint8_t> buf;
      auto period = std::chrono::duration<double>(1.0 / std::max(1.0, r.o.rpc_rate));
      auto next = Clock::now();
      for (uint64_t i = 0; !r.over(); ++i) {
        std::this_thread::sleep_until(next);
        auto s = Clock::now();
        bool eof = false;
        if (!send_msg(fd, r.o.seed, conn_id(Kind::Rpc, 0), i, r.o.rpc_size, buf, r.c) ||
            !recv_msg(fd, r.o.seed, buf, r.c, &eof)) {
          ++r.c.connection_errors;
          break;
        }
        rtt_ns_.record(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s).count()));
        ++ok_;
        next += std::chrono::duration_cast<Clock::duration>(period);
        if (next < Clock::now()) next = Clock::now();  // late: no catch-up burst
      }
      ::close(fd);
    });
  }
  void report(json& out, double) const override {
    out["rpc"] = {{"completed", ok_}, {"rtt_us", rtt_ns_.summary(1e3)}};
  }

 private:
  Histogram rtt_ns_;  // written by its one thread, read after the join
  uint64_t ok_ = 0;
};

// stream: logs at a constant rate, and a param-sync transfer of --sync-size
// every --sync-every (in on/off phases with --sync-on/--sync-off); either
// alone when the other is not asked for (--workload logs or sync).
class Stream : public Workload {
 public:
  void start(Run& r, std::vector<std::thread>& threads) override {
    if (r.o.logs)
      threads.emplace_back([this, &r] {  // logs: constant rate in 64 KiB messages
        int fd = connect_to(r.o, Kind::Logs, 0, r.c);
        if (fd < 0) return;
        std::vector<uint8_t> buf;
        const uint32_t chunk = 64 << 10;
        for (uint64_t i = 0; !r.over(); ++i) {
          auto due =
              r.t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                         static_cast<double>(i) * chunk * 8 / std::max(1.0, r.o.logs_bps)));
          std::this_thread::sleep_until(due);
          if (!send_msg(fd, r.o.seed, conn_id(Kind::Logs, 0), i, chunk, buf, r.c)) {
            ++r.c.connection_errors;
            break;
          }
          logs_bytes_ += chunk;
        }
        ::close(fd);
      });
    if (r.o.sync && r.o.sync_streams == 0)
      threads.emplace_back([this, &r] {  // param-sync: a large transfer periodically
        int fd = connect_to(r.o, Kind::Sync, 0, r.c);
        if (fd < 0) return;
        std::vector<uint8_t> buf;
        for (uint64_t i = 0; !r.over(); ++i) {
          double at = static_cast<double>(i) * r.o.sync_every_s;
          std::this_thread::sleep_until(r.t0 + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(at)));
          if (Clock::now() >= r.end) break;
          // in phases: transfers only in the "on" part of each on+off period
          if (r.o.sync_off_s > 0 && std::fmod(at, r.o.sync_on_s + r.o.sync_off_s) >= r.o.sync_on_s)
            continue;
          if (!send_msg(fd, r.o.seed, conn_id(Kind::Sync, 0), i, r.o.sync_size, buf, r.c)) {
            ++r.c.connection_errors;
            break;
          }
          ++sync_transfers_;
        }
        ::close(fd);
      });
  }
  void report(json& out, double) const override {
    out["stream"]["logs_bytes"] = logs_bytes_.load();
    out["stream"]["sync_transfers"] = sync_transfers_.load();
  }

 private:
  std::atomic<uint64_t> logs_bytes_{0}, sync_transfers_{0};
};

// sync with --sync-streams N: param-sync as N connections on its port, each
// writing messages of --sync-size back to back for the whole run, as a bulk
// transfer does (a parameter or KV-cache sync, iperf3 -P N): never a gap.
// What a stream delivered is what its receiver acknowledged by the run's
// end: the bytes written less those still in the socket (SIOCOUTQ, sent or
// not, unacknowledged), read by its writer when the run ends, so that no
// write is under way.
class SyncStreams : public Workload {
 public:
  bool connect(Run& r) override {
    for (uint16_t i = 0; i < r.o.sync_streams; ++i) {
      int fd = connect_to(r.o, Kind::Sync, i, r.c);
      if (fd < 0) return false;
      streams_.push_back(std::make_unique<One>());
      streams_.back()->fd = fd;
    }
    return true;
  }

  void start(Run& r, std::vector<std::thread>& threads) override {
    for (size_t i = 0; i < streams_.size(); ++i)
      threads.emplace_back([this, &r, i] { write(r, i); });
  }

  ~SyncStreams() override {
    for (auto& s : streams_)
      if (s->fd >= 0) ::close(s->fd);
  }

  void report(json& out, double) const override {
    uint64_t acked = 0, written = 0;
    bool exact = true;
    double lo = 0, hi = 0, secs = 0;
    for (size_t i = 0; i < streams_.size(); ++i) {
      const One& s = *streams_[i];
      acked += s.acked;
      written += s.written;
      exact = exact && s.exact;
      secs = std::max(secs, s.secs);
      double bps = static_cast<double>(s.acked) * 8 / std::max(s.secs, 1e-9);
      lo = i == 0 ? bps : std::min(lo, bps);
      hi = std::max(hi, bps);
    }
    json& j = out["stream"];
    j["sync_streams"] = streams_.size();
    j["sync_written_bytes"] = written;
    j["sync_acked_bytes"] = acked;
    // the streams' bytes acknowledged a second, all together
    j["sync_goodput_bps"] = static_cast<double>(acked) * 8 / std::max(secs, 1e-9);
    j["sync_stream_bps"] = {{"min", lo}, {"max", hi}};
    // false: SIOCOUTQ was refused, and the bytes still in a socket counted
    j["sync_acked_exact"] = exact;
  }

 private:
  struct One {
    int fd = -1;
    uint64_t written = 0;  // bytes written into the socket
    uint64_t acked = 0;    // of them, those the receiver acknowledged by the run's end
    double secs = 0;       // from the run's start until they were counted
    bool exact = true;
  };

  void write(Run& r, size_t i) {
    One& s = *streams_[i];
    const uint32_t conn = conn_id(Kind::Sync, static_cast<uint16_t>(i));
    const uint32_t len = r.o.sync_size;
    std::vector<uint8_t> msg(kHeaderSize + len + kTrailerSize);
    uint64_t written = 0;
    size_t off = msg.size();  // the message under way is sent: make the next
    uint64_t step = 0;
    bool failed = false;
    while (!r.over()) {
      if (off == msg.size()) {
        auto hb = encode(MsgHeader{step, len, conn});
        std::memcpy(msg.data(), hb.data(), hb.size());
        put_payload(msg.data() + kHeaderSize, len, r.o.seed, conn, step++);
        off = 0;
      }
      // never blocked past the run's end: the count below is then exact
      ssize_t n = ::send(s.fd, msg.data() + off, msg.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        written += static_cast<uint64_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(r.end - Clock::now());
        if (left.count() <= 0) break;
        timespec ts{static_cast<time_t>(left.count() / 1000000000),
                    static_cast<long>(left.count() % 1000000000)};
        pollfd p{s.fd, POLLOUT, 0};
        ::ppoll(&p, 1, &ts, nullptr);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      failed = true;
      break;
    }
    int outq = 0;
    s.exact = ::ioctl(s.fd, SIOCOUTQ, &outq) == 0;
    if (!s.exact) outq = 0;
    s.written = written;
    s.acked = written - std::min<uint64_t>(written, static_cast<uint64_t>(std::max(outq, 0)));
    s.secs = std::chrono::duration<double>(Clock::now() - r.t0).count();
    if (failed) ++r.c.connection_errors;
    // the rest of the message under way is not sent: the receiver reads the
    // bytes in flight, then the end of the stream
    ::shutdown(s.fd, SHUT_WR);
  }

  std::vector<std::unique_ptr<One>> streams_;
};

int run_client(const ClientOpts& o) {
  Counters c;
  std::vector<std::unique_ptr<Workload>> work;
  Moe* moe = nullptr;
  if (o.moe) moe = static_cast<Moe*>(work.emplace_back(std::make_unique<Moe>()).get());
  if (moe) moe->count_warmup(o.count_warmup);
  if (o.rpc) work.push_back(std::make_unique<Rpc>());
  if (o.logs || (o.sync && o.sync_streams == 0)) work.push_back(std::make_unique<Stream>());
  if (o.sync && o.sync_streams > 0) work.push_back(std::make_unique<SyncStreams>());
  std::ofstream steps;
  if (!o.steps_file.empty()) {
    steps.open(o.steps_file);
    if (!steps) {
      std::fprintf(stderr, "dp-load: %s: %s\n", o.steps_file.c_str(), std::strerror(errno));
      return 2;
    }
    if (moe) moe->trace_to(&steps);
  }
  Run r{o, c, {}, {}};
  for (auto& w : work)
    if (!w->connect(r)) return 2;
  r.t0 = Clock::now();
  r.end = r.t0 +
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  std::vector<std::thread> threads;
  for (auto& w : work) w->start(r, threads);
  if (moe)
    moe->drive(r);
  else
    std::this_thread::sleep_until(r.end);  // the other workloads run to the end
  const double elapsed = std::chrono::duration<double>(Clock::now() - r.t0).count();
  for (auto& w : work) w->stop();
  for (auto& t : threads) t.join();
  for (auto& w : work) w->joined();

  uint64_t failed = 0;
  for (auto& w : work) failed += w->failures();
  json out = {
      {"role", "client"},
      {"version", dp::kVersion},
      {"connect", o.connect},
      {"mptcp", o.mptcp},
      {"seed", o.seed},
      {"duration_s", elapsed},
      {"workload",
       {{"moe", o.moe},
        {"rpc", o.rpc},
        {"stream", o.logs || o.sync},
        {"logs", o.logs},
        {"sync", o.sync},
        {"sync_streams", o.sync_streams},
        {"dispatch", o.dispatch},
        {"combine", o.combine},
        {"burst", o.burst},
        {"concurrency", o.concurrency},
        {"skew", o.skew},
        {"skew_shift_s", o.skew_shift_s},
        {"sync_on_s", o.sync_on_s},
        {"sync_off_s", o.sync_off_s},
        {"rate", o.rate},
        {"rpc_rate", o.rpc_rate}}},
      {"steps",
       {{"started", 0},
        {"completed", 0},
        {"failed", 0},
        {"longest_stall_s", 0.0},
        {"time_ms", Histogram().summary(1e6)},
        {"warmup", {{"steps", 0}, {"counted", o.count_warmup}, {"ms", json::array()}}}}},
      {"rpc", {{"completed", 0}, {"rtt_us", Histogram().summary(1e3)}}},
      {"stream", {{"logs_bytes", 0}, {"sync_transfers", 0}}},
      {"goodput_bps", 0.0},
  };
  for (auto& w : work) w->report(out, elapsed);
  out["counters"] = c.to_json();
  out["errors"] = c.checksum_errors.load() + c.connection_errors.load() + failed;
  if (!o.json_file.empty()) std::ofstream(o.json_file) << out.dump(1) << "\n";
  if (!o.quiet) {
    const json& s = out["steps"]["time_ms"];
    const json& rt = out["rpc"]["rtt_us"];
    std::printf("dp-load: %.1f s, %llu steps (%llu failed), goodput %s\n", elapsed,
                static_cast<unsigned long long>(out["steps"]["completed"].get<uint64_t>()),
                static_cast<unsigned long long>(failed),
                dp::format_bandwidth(out["goodput_bps"].get<double>()).c_str());
    if (o.moe)
      std::printf("  step time ms   p50 %8.2f  p90 %8.2f  p99 %8.2f  max %8.2f\n",
                  s["p50"].get<double>(), s["p90"].get<double>(), s["p99"].get<double>(),
                  s["max"].get<double>());
    if (o.sync && o.sync_streams > 0) {
      const json& st = out["stream"];
      std::printf("  param-sync     %u stream%s delivered %s (a stream %s to %s)\n",
                  unsigned{o.sync_streams}, o.sync_streams == 1 ? "" : "s",
                  dp::format_bandwidth(st["sync_goodput_bps"].get<double>()).c_str(),
                  dp::format_bandwidth(st["sync_stream_bps"]["min"].get<double>()).c_str(),
                  dp::format_bandwidth(st["sync_stream_bps"]["max"].get<double>()).c_str());
    }
    const json& w = out["steps"]["warmup"];
    if (w["steps"].get<size_t>() > 0) {
      double worst = 0;
      for (auto& v : w["ms"]) worst = std::max(worst, v.get<double>());
      std::printf(
          "  warm-up        %zu step%s started before any had finished, the slowest "
          "%.2f ms: %s\n",
          w["steps"].get<size_t>(), w["steps"].get<size_t>() == 1 ? "" : "s", worst,
          o.count_warmup ? "counted above (--count-warmup)" : "not counted above");
    }
    std::printf("  rpc rtt us     p50 %8.0f  p90 %8.0f  p99 %8.0f  max %8.0f  (%llu)\n",
                rt["p50"].get<double>(), rt["p90"].get<double>(), rt["p99"].get<double>(),
                rt["max"].get<double>(),
                static_cast<unsigned long long>(out["rpc"]["completed"].get<uint64_t>()));
    std::printf("  errors         %llu checksum, %llu connection, %llu steps unfinished\n",
                static_cast<unsigned long long>(c.checksum_errors.load()),
                static_cast<unsigned long long>(c.connection_errors.load()),
                static_cast<unsigned long long>(failed));
  }
  return out["errors"].get<uint64_t>() ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dp-load - MoE workload generator (dualpath " + std::string(dp::kVersion) + ")"};
  app.require_subcommand(1);
  ::signal(SIGPIPE, SIG_IGN);
  for (int s : {SIGINT, SIGTERM}) ::signal(s, [](int) { g_stop = true; });

  ServerOpts so;
  auto* srv = app.add_subcommand("server", "accept a client's connections and answer them");
  srv->add_option("--bind", so.bind, "address to listen on")->capture_default_str();
  srv->add_flag("--mptcp", so.mptcp, "IPPROTO_MPTCP sockets");
  srv->add_option("--congestion-control", so.congestion_control,
                  "TCP congestion control of every socket (default: the namespace's)");
  srv->add_flag("--once", so.once, "exit when the first client is done");
  srv->add_option("--json", so.json_file, "write the server's counters here");
  srv->add_option("--max-conns", so.max_conns, "connections of each moe kind accepted")
      ->capture_default_str();

  ClientOpts co;
  std::string workload = "moe,rpc,stream", duration = "10s", burst = "1MiB", gap = "0s",
              logs = "20Mbit", sync_size = "8MiB", sync_every = "1s", skew_shift = "2s",
              sync_on = "0s", sync_off = "0s";
  auto* cli = app.add_subcommand("client", "generate the workload toward a server");
  cli->add_option("--connect", co.connect, "server address")->required();
  cli->add_option("--workload", workload,
                  "comma-separated: moe, rpc, stream (stream: logs and sync, each may be named "
                  "alone)")
      ->capture_default_str();
  cli->add_option("--duration", duration, "how long")->capture_default_str();
  cli->add_option("--dispatch", co.dispatch, "dispatch connections")->capture_default_str();
  cli->add_option("--combine", co.combine, "combine connections")->capture_default_str();
  cli->add_option("--burst", burst, "bytes per connection per step")->capture_default_str();
  cli->add_option("--gap", gap, "pause between steps (closed loop, 1 in flight)")
      ->capture_default_str();
  cli->add_option("--concurrency", co.concurrency, "steps in flight (closed loop)")
      ->capture_default_str();
  cli->add_option("--rate", co.rate, "steps per second (open loop; 0: closed loop)");
  cli->add_option("--rpc-rate", co.rpc_rate, "control requests per second")->capture_default_str();
  cli->add_option("--rpc-size", co.rpc_size, "bytes per request and response")
      ->capture_default_str();
  cli->add_option("--logs-rate", logs, "logs stream rate")->capture_default_str();
  cli->add_option("--sync-size", sync_size,
                  "param-sync transfer size (with --sync-streams: each message's)")
      ->capture_default_str();
  auto* o_every =
      cli->add_option("--sync-every", sync_every, "param-sync period")->capture_default_str();
  auto* o_on = cli->add_option("--sync-on", sync_on, "param-sync in phases: this long on ...")
                   ->capture_default_str();
  auto* o_off = cli->add_option("--sync-off", sync_off, "... then this long off (0s: always on)")
                    ->capture_default_str();
  int sync_streams = 0;
  auto* o_streams = cli->add_option(
      "--sync-streams", sync_streams,
      "param-sync as N connections (1 to 64) writing continuously for the whole run, "
      "as a bulk transfer (0: a --sync-size transfer every --sync-every)");
  o_streams->capture_default_str();
  cli->add_option("--skew", co.skew,
                  "expert popularity: connection shares ~ 1/(rank+1)^skew (0: equal)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 8.0));
  cli->add_option("--skew-shift", skew_shift, "the hottest expert changes this often")
      ->capture_default_str();
  cli->add_option("--seed", co.seed, "payload seed")->capture_default_str();
  cli->add_flag("--mptcp", co.mptcp, "IPPROTO_MPTCP sockets");
  cli->add_option("--congestion-control", co.congestion_control,
                  "TCP congestion control of every socket (default: the namespace's)");
  cli->add_option("--json", co.json_file, "write the results here");
  cli->add_option("--steps", co.steps_file,
                  "write each MoE step here, one JSON line: its time and each combine's");
  cli->add_flag("--count-warmup", co.count_warmup,
                "count the steps started before any had finished in the step times");
  cli->add_flag("-q,--quiet", co.quiet, "no table");
  for (auto* sc : {srv, cli}) {
    Ports& p = sc == srv ? so.ports : co.ports;
    sc->add_option("--port-dispatch", p.dispatch, "first dispatch port")->capture_default_str();
    sc->add_option("--port-combine", p.combine, "first combine port")->capture_default_str();
    sc->add_option("--port-sync", p.sync, "param-sync port")->capture_default_str();
    sc->add_option("--port-control", p.control, "control (rpc) port")->capture_default_str();
    sc->add_option("--port-logs", p.logs, "logs port")->capture_default_str();
  }
  CLI11_PARSE(app, argc, argv);

  if (srv->parsed()) return congestion_control_usable(so.congestion_control) ? run_server(so) : 2;

  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "dp-load: %s\n", what.c_str());
    return 2;
  };
  co.moe = co.rpc = co.logs = co.sync = false;
  {
    size_t at = 0;
    for (;;) {
      size_t comma = workload.find(',', at);
      std::string w = workload.substr(at, comma == std::string::npos ? comma : comma - at);
      if (w == "moe")
        co.moe = true;
      else if (w == "rpc")
        co.rpc = true;
      else if (w == "stream")
        co.logs = co.sync = true;
      else if (w == "logs")
        co.logs = true;
      else if (w == "sync")
        co.sync = true;
      else
        return bad("--workload: unknown workload \"" + w +
                   "\" (moe, rpc, stream, logs, sync; comma-separated, e.g. moe,rpc,stream)");
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  if (sync_streams < 0 || sync_streams > 64)
    return bad("--sync-streams: " + std::to_string(sync_streams) +
               " is not 0 to 64 (N continuous param-sync connections; 0: periodic transfers)");
  co.sync_streams = static_cast<uint16_t>(sync_streams);
  if (co.sync_streams > 0) {
    if (!co.sync) return bad("--sync-streams needs param-sync in --workload (stream or sync)");
    for (auto* opt : {o_every, o_on, o_off})
      if (opt->count() > 0)
        return bad(opt->get_name() +
                   " is for periodic transfers; --sync-streams writes continuously (leave out "
                   "one of them)");
  }
  auto d = dp::parse_duration(duration);
  if (!d) return bad("--duration: " + d.error().what());
  co.duration_s = std::chrono::duration<double>(*d).count();
  auto g = dp::parse_duration(gap);
  if (!g) return bad("--gap: " + g.error().what());
  co.gap_s = std::chrono::duration<double>(*g).count();
  auto se = dp::parse_duration(sync_every);
  if (!se) return bad("--sync-every: " + se.error().what());
  co.sync_every_s = std::chrono::duration<double>(*se).count();
  auto son = dp::parse_duration(sync_on), soff = dp::parse_duration(sync_off);
  if (!son) return bad("--sync-on: " + son.error().what());
  if (!soff) return bad("--sync-off: " + soff.error().what());
  co.sync_on_s = std::chrono::duration<double>(*son).count();
  co.sync_off_s = std::chrono::duration<double>(*soff).count();
  if (co.sync_off_s > 0 && co.sync_on_s <= 0) return bad("--sync-off needs --sync-on");
  auto ks = dp::parse_duration(skew_shift);
  if (!ks || ks->count() <= 0) return bad("--skew-shift: a duration such as 2s");
  co.skew_shift_s = std::chrono::duration<double>(*ks).count();
  auto lr = dp::parse_bandwidth(logs);
  if (!lr) return bad("--logs-rate: " + lr.error().what());
  co.logs_bps = static_cast<double>(*lr);
  auto b = parse_size(burst);
  auto ss = parse_size(sync_size);
  if (!b || *b == 0 || *b > (256u << 20))
    return bad("--burst: a size such as 1MiB (at most 256MiB)");
  if (!ss || *ss == 0 || *ss > (256u << 20)) return bad("--sync-size: a size such as 8MiB");
  co.burst = static_cast<uint32_t>(*b);
  co.sync_size = static_cast<uint32_t>(*ss);
  if (co.dispatch == 0 || co.combine == 0) return bad("--dispatch and --combine must be >= 1");
  if (!congestion_control_usable(co.congestion_control)) return 2;
  return run_client(co);
}
