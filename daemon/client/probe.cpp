// SPDX-License-Identifier: Apache-2.0
#include "dualpath/client/probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "dualpath/core/mptcp_sockopt.h"

namespace dp::probe {

using std::chrono::milliseconds;

Result<Request> parse_request(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (!j.is_object()) return make_error(0, "the request is not a JSON object");
  Request r;
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return make_error(0, "the request has no \"op\"");
  r.op = op->get<std::string>();
  if (r.op != "hello" && r.op != "echo" && r.op != "sink" && r.op != "source")
    return make_error(0, fmt::format("unknown op \"{}\" (hello, echo, sink, source)", r.op));
  if (auto s = j.find("size"); s != j.end()) {
    if (!s->is_number_integer() || s->get<int64_t>() < 1 || s->get<int64_t>() > kMaxEchoSize)
      return make_error(0, fmt::format("size must be an integer from 1 to {}", kMaxEchoSize));
    r.size = s->get<int>();
  }
  if (auto s = j.find("seconds"); s != j.end()) {
    if (!s->is_number() || !std::isfinite(s->get<double>()) || s->get<double>() <= 0)
      return make_error(0, "seconds must be a positive number");
    r.seconds = s->get<double>();
  }
  return r;
}

std::string to_string(const Target& t) {
  std::string s = t.addr.family == AF_INET6 ? fmt::format("[{}]:{}", t.addr.str(), t.port)
                                            : fmt::format("{}:{}", t.addr.str(), t.port);
  if (t.source) s += " from " + t.source->str();
  if (t.mark) s += fmt::format(" mark {:#x}", t.mark);
  return s;
}

namespace {

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

}  // namespace

int wait_for(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

Result<void> write_all(int fd, const char* data, size_t len, Clock::time_point deadline) {
  while (len) {
    ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return make_error(errno, "send failed");
    if (wait_for(fd, POLLOUT, deadline) <= 0) return make_error(ETIMEDOUT, "send timed out");
  }
  return {};
}

Result<void> read_exact(int fd, char* data, size_t len, Clock::time_point deadline) {
  while (len) {
    ssize_t n = ::recv(fd, data, len, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return make_error(0, "the peer closed the connection");
    if (errno != EAGAIN && errno != EINTR) return make_error(errno, "recv failed");
    if (wait_for(fd, POLLIN, deadline) <= 0) return make_error(ETIMEDOUT, "no reply");
  }
  return {};
}

Result<std::string> read_line(int fd, Clock::time_point deadline) {
  std::string line;
  char ch = 0;
  while (line.size() < kMaxRequestLine) {
    DP_TRY(read_exact(fd, &ch, 1, deadline));
    if (ch == '\n') return line;
    line += ch;
  }
  return make_error(0, "the line is too long");
}

Result<Fd> connect_to(const Target& t, milliseconds timeout) {
  int fd = ::socket(t.addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, t.protocol);
  if (fd < 0)
    return make_error(errno, t.protocol == IPPROTO_MPTCP
                                 ? "an MPTCP socket failed (net.mptcp.enabled = 0 here?)"
                                 : "socket failed");
  Fd c(fd);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (t.mark && ::setsockopt(fd, SOL_SOCKET, SO_MARK, &t.mark, sizeof(t.mark)) != 0)
    return make_error(errno,
                      fmt::format("setting mark {:#x} failed (needs CAP_NET_ADMIN)", t.mark));
  if (t.source) {
    if (t.source->family != t.addr.family)
      return make_error(0, fmt::format("source {} and target {} are of different families",
                                       t.source->str(), t.addr.str()));
    auto src = sockaddr_of(*t.source, 0);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&src.ss), src.len) != 0)
      return make_error(errno, fmt::format("bind to {} failed", t.source->str()));
  }
  auto dst = sockaddr_of(t.addr, t.port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst.ss), dst.len) != 0) {
    if (errno != EINPROGRESS) return make_error(errno, "connect failed");
    int r = wait_for(fd, POLLOUT, Clock::now() + timeout);
    if (r == 0) return make_error(ETIMEDOUT, "connect timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (r < 0 || err) return make_error(err ? err : errno, "connect failed");
  }
  return c;
}

Result<bool> answers_mptcp(Target t, milliseconds timeout) {
  t.protocol = IPPROTO_MPTCP;
  auto deadline = Clock::now() + timeout;
  auto c = connect_to(t, timeout);
  if (!c) return c.error();
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  DP_TRY(exchange(*c, {{"op", "hello"}}, std::max(left, milliseconds(1))));
  int is = 0;
  socklen_t len = sizeof(is);
  // an MPTCP socket that fell back passes this to its TCP subflow: 0
  if (::getsockopt(c->get(), SOL_TCP, mptcp::kTcpIsMptcp, &is, &len) != 0)
    return make_error(errno, "getsockopt(TCP_IS_MPTCP) failed");
  return is != 0;
}

Result<json> exchange(const Fd& c, const json& request, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string line = request.dump() + "\n";
  DP_TRY(write_all(c.get(), line.data(), line.size(), deadline));
  auto reply = read_line(c.get(), deadline);
  if (!reply) return reply.error();
  json j = json::parse(*reply, nullptr, false);
  if (!j.is_object()) return make_error(0, "the responder's reply is not JSON");
  if (!j.value("ok", false))
    return make_error(j.value("retry", false) ? EAGAIN : 0,
                      "the responder refused: " + j.value("error", "?"));
  return j;
}

Result<Session> open_session(const Target& t, const json& request, milliseconds timeout) {
  // A responder at its session limit answers "busy" (its sessions are
  // short), and one that this address asked too often "rate" (a session
  // comes back every 1/64 s): both say "retry" (EAGAIN here; a responder of
  // an earlier release only the word) and are asked again until the
  // timeout. The connects a probe times are refused so once they exceed the
  // burst.
  auto give_up = Clock::now() + timeout;
  for (;;) {
    auto c = connect_to(t, timeout);
    if (!c) return c.error();
    auto r = exchange(*c, request, timeout);
    if (r) return Session{std::move(*c), std::move(*r)};
    const std::string& why = r.error().message;
    bool later = r.error().code == EAGAIN || why.rfind("the responder refused: busy:", 0) == 0 ||
                 why.rfind("the responder refused: rate:", 0) == 0;
    if (!later || Clock::now() >= give_up) return r.error();
    std::this_thread::sleep_for(milliseconds(20));
  }
}

Result<json> hello(const Target& t, milliseconds timeout) {
  auto s = open_session(t, {{"op", "hello"}}, timeout);
  if (!s) return s.error();
  return std::move(s->reply);
}

ConnectStats connects(const Target& t, int count, milliseconds timeout) {
  ConnectStats s;
  for (int i = 0; i < count; ++i) {
    auto start = Clock::now();
    auto c = connect_to(t, timeout);
    if (c) {
      s.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      continue;
    }
    s.error = c.error().what();
    if (c.error().code == ETIMEDOUT)
      ++s.lost;
    else
      ++s.refused;
  }
  return s;
}

UdpEchoStats udp_echoes(const Target& t, int count, milliseconds timeout) {
  UdpEchoStats s;
  Fd c(::socket(t.addr.family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!c.valid()) {
    s.error = std::string("socket failed: ") + std::strerror(errno);
    return s;
  }
  int fd = c.get();
  if (t.mark && ::setsockopt(fd, SOL_SOCKET, SO_MARK, &t.mark, sizeof(t.mark)) != 0) {
    s.error = fmt::format("setting mark {:#x} failed (needs CAP_NET_ADMIN)", t.mark);
    return s;
  }
  if (t.source) {
    auto src = sockaddr_of(*t.source, 0);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&src.ss), src.len) != 0) {
      s.error = fmt::format("bind to {} failed: {}", t.source->str(), std::strerror(errno));
      return s;
    }
  }
  auto dst = sockaddr_of(t.addr, t.port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst.ss), dst.len) != 0) {
    s.error = std::string("connect failed: ") + std::strerror(errno);
    return s;
  }
  for (int i = 0; i < count; ++i) {
    std::string out = fmt::format("dualpath udp echo {}", i);
    if (::send(fd, out.data(), out.size(), 0) != static_cast<ssize_t>(out.size())) {
      ++s.refused;  // an earlier datagram's ICMP unreachable, reported here
      continue;
    }
    auto deadline = Clock::now() + timeout;
    bool got = false, refused = false;
    while (!got && !refused && wait_for(fd, POLLIN, deadline) == 1) {
      char in[64];
      ssize_t n = ::recv(fd, in, sizeof(in), 0);
      if (n < 0) refused = errno == ECONNREFUSED;
      got = n == static_cast<ssize_t>(out.size()) && std::memcmp(in, out.data(), out.size()) == 0;
    }
    s.answered += got;
    s.refused += refused;
    s.lost += !got && !refused;
  }
  return s;
}

Result<EchoStats> echo(const Target& t, int count, int size, milliseconds interval) {
  auto session = open_session(t, {{"op", "echo"}, {"size", size}}, milliseconds(2000));
  if (!session) return session.error();
  const Fd* c = &session->fd;
  EchoStats s;
  std::string out(static_cast<size_t>(size), 'p'), in(static_cast<size_t>(size), 0);
  for (int i = 0; i < count; ++i) {
    auto start = Clock::now();
    auto deadline = start + milliseconds(2000);
    DP_TRY(write_all(c->get(), out.data(), out.size(), deadline));
    DP_TRY(read_exact(c->get(), in.data(), in.size(), deadline));
    s.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (interval.count()) std::this_thread::sleep_for(interval);
  }
  tcp_info ti{};
  socklen_t len = sizeof(ti);
  if (::getsockopt(c->get(), IPPROTO_TCP, TCP_INFO, &ti, &len) == 0)
    s.retransmits = ti.tcpi_total_retrans;
  return s;
}

namespace {

// One stream: bits per second, or an error.
Result<double> one_stream(const Target& t, bool upload, double seconds) {
  json req = upload ? json{{"op", "sink"}} : json{{"op", "source"}, {"seconds", seconds}};
  auto session = open_session(t, req, milliseconds(2000));
  if (!session) return session.error();
  const Fd* c = &session->fd;
  std::vector<char> buf(256 * 1024, 's');
  auto start = Clock::now();
  auto limit = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(seconds + 5));
  if (upload) {
    auto end =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (Clock::now() < end) {
      ssize_t n = ::send(c->get(), buf.data(), buf.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return make_error(errno, "send failed");
      if (n < 0) wait_for(c->get(), POLLOUT, end);
    }
    ::shutdown(c->get(), SHUT_WR);
    auto line = read_line(c->get(), limit);
    if (!line) return line.error();
    json r = json::parse(*line, nullptr, false);
    double secs = r.is_object() ? r.value("seconds", 0.0) : 0.0;
    if (secs <= 0) return make_error(0, "the responder did not report what it received");
    return r.value("bytes", 0.0) * 8 / secs;
  }
  uint64_t bytes = 0;
  for (;;) {
    ssize_t n = ::recv(c->get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      bytes += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) break;
    if (errno != EAGAIN && errno != EINTR) return make_error(errno, "recv failed");
    if (wait_for(c->get(), POLLIN, limit) <= 0) return make_error(ETIMEDOUT, "the source stalled");
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return secs > 0 ? static_cast<double>(bytes) * 8 / secs : 0.0;
}

}  // namespace

Result<double> throughput(const Target& t, bool upload, int streams, double seconds) {
  std::vector<Result<double>> results(static_cast<size_t>(streams), 0.0);
  std::vector<std::thread> threads;
  for (int i = 0; i < streams; ++i)
    threads.emplace_back(
        [&, i] { results[static_cast<size_t>(i)] = one_stream(t, upload, seconds); });
  for (auto& th : threads) th.join();
  double sum = 0;
  for (auto& r : results) {
    if (!r) return r.error();
    sum += *r;
  }
  return sum;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) {
    auto i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(i, 1, v.size()) - 1];
  };
  p.p50 = rank(0.50);
  p.p95 = rank(0.95);
  p.p99 = rank(0.99);
  p.min = v.front();
  p.max = v.back();
  return p;
}

json to_json(const Percentiles& p) {
  return {{"n", p.n},     {"p50", p.p50}, {"p95", p.p95},
          {"p99", p.p99}, {"min", p.min}, {"max", p.max}};
}

}  // namespace dp::probe
