// SPDX-License-Identifier: Apache-2.0
#include "responder.h"

#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dualpath/client/probe.h"
#include "dualpath/kernel/node_checks.h"

namespace dp {

namespace {

using probe::Clock;

// `mptcp`: an MPTCP listener, which answers MPTCP probes (dpctl validate's
// check for multipath classes) and plain TCP as before; plain TCP where this
// kernel makes no MPTCP socket. `udp`: the UDP echo socket instead.
Result<Fd> listen_on(const IpAddr& addr, uint16_t port, uint32_t mark, bool mptcp,
                     bool udp = false) {
  const int kType = (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC;
  Fd fd(mptcp && !udp ? ::socket(addr.family, kType, IPPROTO_MPTCP) : -1);
  if (!fd.valid()) fd.reset(::socket(addr.family, kType, 0));
  if (!fd.valid()) return make_error(errno, "socket failed");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // The rail's address may not be configured yet (node checks say so): bind anyway.
  if (addr.family == AF_INET) {
    ::setsockopt(fd.get(), IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
  } else {
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_FREEBIND, &one, sizeof(one));
  }
  // Handshake and replies take the rail's table, as the probe that came in.
  if (mark && ::setsockopt(fd.get(), SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) != 0)
    return make_error(errno, fmt::format("setting mark {:#x} failed", mark));
  auto sa = dp::sockaddr_of(addr, port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa.ss), sa.len) != 0)
    return make_error(errno, "bind failed");
  if (!udp && ::listen(fd.get(), 128) != 0) return make_error(errno, "listen failed");
  return fd;
}

std::string endpoint(const IpAddr& a, uint16_t port) {
  return a.family == AF_INET6 ? fmt::format("[{}]:{}", a.str(), port)
                              : fmt::format("{}:{}", a.str(), port);
}

}  // namespace

Responder::~Responder() { stop(); }

Result<void> Responder::start(const Policy& p) {
  stop();
  policy_ = p;
  errors_.clear();
  if (!p.responder.enable) return {};
  // rail i's port, and with a multipath class its MPTCP port after all of
  // them; then rail i's UDP echo on its TCP port
  const size_t P = p.paths.size(), tcp_ports = responder_ports(p);
  udp_echo_ = false;
  for (size_t j = 0; j < tcp_ports + P; ++j) {
    const bool udp = j >= tcp_ports, mptcp = !udp && j >= P;
    const size_t i = udp ? j - tcp_ports : j % P;
    const auto& ps = p.paths[i];
    auto port = static_cast<uint16_t>(p.responder.port + (udp ? i : j));
    for (const auto& src : {ps.source, ps.source6}) {
      if (!src) continue;
      auto where = fmt::format("{} ({}{})", endpoint(*src, port), ps.name,
                               udp     ? ", UDP"
                               : mptcp ? ", MPTCP"
                                       : "");
      auto fd = listen_on(*src, port, ps.fwmark, mptcp, udp);
      if (!fd) {
        errors_.push_back(fmt::format("{}: {}", where, fd.error().what()));
        spdlog::warn("responder: cannot listen on {}: {}", where, fd.error().what());
        continue;
      }
      listeners_.push_back({std::move(*fd), i, where, udp});
      udp_echo_ = udp_echo_ || udp;
    }
  }
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return make_error(errno, "eventfd for the responder failed");
  stopping_ = false;
  thread_ = std::thread([this] { accept_loop(); });
  std::string on;
  for (const auto& l : listeners_) on += (on.empty() ? "" : ", ") + l.where;
  spdlog::info("responder: listening on {}", on.empty() ? "nothing" : on);
  if (listeners_.empty())
    return make_error(0, "the responder could not listen on any rail: " +
                             (errors_.empty() ? "no path has a source address" : errors_.front()));
  return {};
}

void Responder::stop() {
  if (thread_.joinable()) {
    stopping_ = true;
    uint64_t one = 1;
    if (::write(wake_.get(), &one, sizeof(one)) < 0) {
      // the loop also polls stopping_ once a second
    }
    thread_.join();
  }
  drain_closing(true);
  reap(true);
  listeners_.clear();
  wake_.reset();
}

void Responder::reap(bool all) {
  std::list<Session> done;
  {
    std::lock_guard lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (all && it->fd >= 0) ::shutdown(it->fd, SHUT_RDWR);  // ends its I/O at once
      if (all || it->done) {
        auto next = std::next(it);
        done.splice(done.end(), sessions_, it);
        it = next;
      } else {
        ++it;
      }
    }
  }
  for (auto& s : done)
    if (s.thread.joinable()) s.thread.join();
}

void Responder::accept_loop() {
  std::vector<pollfd> fds;
  fds.push_back({wake_.get(), POLLIN, 0});
  for (const auto& l : listeners_) fds.push_back({l.fd.get(), POLLIN, 0});
  while (!stopping_) {
    int n = ::poll(fds.data(), fds.size(), closing_.empty() ? 1000 : 20);
    reap(false);
    drain_closing(false);
    if (n <= 0) continue;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      if (listeners_[i - 1].udp) {
        echo_udp(fds[i].fd);
        continue;
      }
      for (;;) {  // the whole backlog: a burst of connects must not overflow it
        sockaddr_storage ss{};
        socklen_t len = sizeof(ss);
        int fd = ::accept4(fds[i].fd, reinterpret_cast<sockaddr*>(&ss), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          // EMFILE and friends: leave the connection in the backlog, do not spin
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            ::poll(nullptr, 0, 100);
          break;
        }
        IpAddr peer = dp::address_of(ss);
        auto allowed = policy_.responder_allowed();
        bool ok = std::any_of(allowed.begin(), allowed.end(),
                              [&](const Prefix& pf) { return pf.contains(peer); });
        std::lock_guard lock(mu_);
        if (!ok) {
          ++refused_address_;
          ::close(fd);
          continue;
        }
        auto active = std::count_if(sessions_.begin(), sessions_.end(),
                                    [](const Session& x) { return !x.done; });
        bool too_fast =
            !session_rate_.allow({peer.family, peer.bytes}, std::chrono::steady_clock::now());
        if (too_fast || active >= policy_.responder.max_sessions) {
          ++(too_fast ? refused_rate_ : refused_busy_);
          // "retry": a refusal that passes (probe::open_session asks again)
          const char fast[] =
              "{\"ok\":false,\"retry\":true,\"error\":\"rate: too many sessions a second from "
              "this address\"}\n";
          const char busy[] =
              "{\"ok\":false,\"retry\":true,\"error\":\"busy: too many sessions\"}\n";
          const char* why = too_fast ? fast : busy;
          if (::send(fd, why, std::strlen(why), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            // the client learns it from the closed connection instead
          }
          ::shutdown(fd, SHUT_WR);
          closing_.push_back({fd, std::chrono::steady_clock::now() + std::chrono::seconds(1)});
          continue;
        }
        ++served_;
        auto& s = sessions_.emplace_back();
        s.fd = fd;
        size_t path = listeners_[i - 1].path;
        s.thread = std::thread([this, fd, path, &s] { serve(fd, path, &s); });
      }
    }
  }
}

// Every datagram waiting, back to its sender if the policy allows it; at
// most 64 a wake-up, so that a flood cannot hold the TCP listeners back.
void Responder::echo_udp(int fd) {
  char buf[512];
  auto allowed = policy_.responder_allowed();
  for (int k = 0; k < 64; ++k) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ssize_t n = ::recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
                           reinterpret_cast<sockaddr*>(&ss), &len);
    if (n < 0) return;
    IpAddr peer = dp::address_of(ss);
    bool ok = std::any_of(allowed.begin(), allowed.end(),
                          [&](const Prefix& pf) { return pf.contains(peer); });
    std::lock_guard lock(mu_);
    if (!ok) {
      ++refused_address_;
      continue;
    }
    if (!echo_rate_.allow({peer.family, peer.bytes}, std::chrono::steady_clock::now())) {
      ++refused_rate_;
      continue;
    }
    if (n > static_cast<ssize_t>(sizeof(buf))) {  // larger than an echo asks
      ++bad_requests_;
      continue;
    }
    if (::sendto(fd, buf, static_cast<size_t>(n), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&ss),
                 len) == n)
      ++udp_echoed_;
  }
}

void Responder::drain_closing(bool all) {
  auto now = std::chrono::steady_clock::now();
  char buf[4096];
  for (auto& c : closing_) {
    bool eof = false;
    for (;;) {
      ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) continue;
      eof = n == 0 || (errno != EAGAIN && errno != EINTR);
      break;
    }
    if (eof || all || now >= c.until) {
      ::close(c.fd);
      c.fd = -1;
    }
  }
  closing_.erase(
      std::remove_if(closing_.begin(), closing_.end(), [](const Closing& c) { return c.fd < 0; }),
      closing_.end());
}

json Responder::hello_json(size_t path) const {
  json paths = json::array();
  const size_t P = policy_.paths.size();
  for (size_t i = 0; i < P; ++i) {
    const auto& ps = policy_.paths[i];
    json pj = {{"name", ps.name},
               {"interface", ps.interface},
               {"mtu", interface_mtu(ps.interface)},
               {"port", policy_.responder.port + i},
               {"source", ps.source ? json(ps.source->str()) : json(nullptr)},
               {"source6", ps.source6 ? json(ps.source6->str()) : json(nullptr)}};
    if (responder_ports(policy_) > P) pj["mptcp_port"] = policy_.responder.port + P + i;
    paths.push_back(std::move(pj));
  }
  return {{"ok", true},
          {"node", policy_.node},
          {"topology", to_string(policy_.topology)},
          {"path", policy_.paths[path].name},
          {"paths", paths},
          {"udp_echo", udp_echo_},
          {"limits",
           {{"sessions", policy_.responder.max_sessions},
            {"seconds", std::chrono::duration<double>(policy_.responder.max_duration).count()}}}};
}

void Responder::serve(int fd, size_t path, Session* self) {
  auto start = Clock::now();
  auto deadline = start + policy_.responder.max_duration;
  auto reply = [&](const json& j) {
    std::string line = j.dump() + "\n";
    return probe::write_all(fd, line.data(), line.size(), deadline);
  };
  auto line = probe::read_line(fd, std::min(deadline, start + std::chrono::seconds(2)));
  auto req = line ? probe::parse_request(*line) : Result<probe::Request>(line.error());
  if (!req) {
    {
      std::lock_guard lock(mu_);
      ++bad_requests_;
    }
    (void)reply({{"ok", false}, {"error", req.error().what()}});
  } else if (req->op == "hello") {
    (void)reply(hello_json(path));
  } else if (req->op == "echo") {
    if (reply({{"ok", true}})) {
      std::string buf(static_cast<size_t>(req->size), 0);
      while (probe::read_exact(fd, buf.data(), buf.size(), deadline) &&
             probe::write_all(fd, buf.data(), buf.size(), deadline)) {
      }
    }
  } else if (req->op == "sink") {
    if (reply({{"ok", true}})) {
      std::vector<char> buf(256 * 1024);
      uint64_t bytes = 0;
      auto first = Clock::now();
      for (;;) {
        ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n > 0) {
          bytes += static_cast<uint64_t>(n);
          continue;
        }
        if (n == 0) break;
        if (errno != EAGAIN && errno != EINTR) break;
        if (probe::wait_for(fd, POLLIN, deadline) <= 0) break;
      }
      double secs = std::chrono::duration<double>(Clock::now() - first).count();
      // the report gets a second of its own after the limit
      deadline = Clock::now() + std::chrono::seconds(1);
      (void)reply({{"bytes", bytes}, {"seconds", secs}});
    }
  } else if (req->op == "source") {
    auto until = std::min(deadline, start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(req->seconds)));
    if (reply({{"ok", true}})) {
      std::vector<char> buf(256 * 1024, 'r');
      while (Clock::now() < until) {
        ssize_t n = ::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR) break;
        if (n < 0 && probe::wait_for(fd, POLLOUT, until) < 0) break;
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    ::close(fd);
    self->fd = -1;
  }
  self->done = true;
}

json Responder::status() const {
  std::lock_guard lock(mu_);
  json on = json::array();
  for (const auto& l : listeners_) on.push_back(l.where);
  return {{"enabled", policy_.responder.enable},
          {"port", policy_.responder.port},
          {"listening", on},
          {"errors", errors_},
          {"sessions", sessions_.size()},
          {"max_sessions", policy_.responder.max_sessions},
          {"served", served_},
          {"refused_address", refused_address_},
          {"refused_busy", refused_busy_},
          {"bad_requests", bad_requests_},
          {"udp_echoed", udp_echoed_},
          {"refused_rate", refused_rate_}};
}

}  // namespace dp
