// SPDX-License-Identifier: Apache-2.0
#include "lab_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "dualpath/core/mptcp_sockopt.h"

namespace lab {

std::vector<std::string> tcp_sockets(const std::string& ns, const std::string& filter) {
  std::vector<std::string> out;
  std::istringstream in(sh("ip netns exec " + ns + " ss -tniH '" + filter + "'").out);
  std::string first, info;
  while (std::getline(in, first) && std::getline(in, info)) out.push_back(first + " " + info);
  return out;
}

uint64_t max_pacing_bps(const std::string& socket) {
  static const std::regex cap(R"(pacing_rate \d+bps/(\d+)bps)");
  std::smatch m;
  return std::regex_search(socket, m, cap) ? std::stoull(m[1]) : 0;
}

Cmd sh(const std::string& cmd) {
  Cmd r;
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string must(const std::string& cmd) {
  Cmd r = sh(cmd);
  EXPECT_EQ(r.rc, 0) << cmd << "\n" << r.out;
  return r.out;
}

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double cpu_seconds(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  unsigned long long ut = 0, st = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) ut = std::stoull(field);
    if (i == 15) st = std::stoull(field);
  }
  return static_cast<double>(ut + st) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string dp_lab() { return std::string(DP_SOURCE_DIR) + "/tools/dp-lab"; }

LabDaemonAfter::~LabDaemonAfter() {
  if (node_.empty()) return;
  (void)sh(dp_lab() + " stop " + node_);
  Cmd r = sh(dp_lab() + " start " + node_);
  if (r.rc != 0) ADD_FAILURE() << "the lab's daemon on " << node_ << " did not start: " << r.out;
}

uint64_t tx_bytes(const std::string& ns, const std::string& dev) {
  Cmd r = sh("ip -n " + ns + " -j -s link show dev " + dev);
  json j = json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) {
    ADD_FAILURE() << "cannot read link statistics of " << dev << " in " << ns << ": " << r.out;
    return 0;
  }
  return j[0]["stats64"]["tx"]["bytes"].get<uint64_t>();
}

sockaddr_storage make_addr(const std::string& ip, uint16_t port, socklen_t* len) {
  sockaddr_storage ss{};
  if (ip.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    inet_pton(AF_INET6, ip.c_str(), &a->sin6_addr);
    *len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, ip.c_str(), &a->sin_addr);
    *len = sizeof(*a);
  }
  return ss;
}

json dpctl(const std::string& node, const std::string& args) {
  Cmd r = sh(dp_lab() + " dpctl " + node + " -j " + args);
  json j = json::parse(r.out, nullptr, false);
  if (j.is_discarded()) ADD_FAILURE() << "dpctl " << args << " printed no JSON: " << r.out;
  return j;
}

json mptcp_conns(const std::string& node) {
  json f = dpctl(node, "flow list");
  return f.is_object() && f.contains("mptcp") ? f["mptcp"] : json::array();
}

json mptcp_conn(const std::string& node, uint16_t port) {
  for (auto& c : mptcp_conns(node))
    if (c["rport"] == port || c["lport"] == port) return c;
  return json();
}

std::set<std::string> subflow_paths(const json& c, const char* role) {
  std::set<std::string> out;
  if (!c.is_object()) return out;
  for (auto& s : c["subflows"])
    if (s["path"].is_string() && (!role || s["role"] == role) &&
        (s.value("bound", true) || s["lport"] != c["lport"] || s["rport"] != c["rport"]))
      out.insert(s["path"].get<std::string>());
  return out;
}

namespace {

bool enter_netns(const std::string& ns) {
  if (ns.empty()) return true;  // stay in the current (root) namespace
  int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  return ok;
}

struct Wire {
  uint64_t bytes = 0, sum = 0;
  uint64_t max_gap_us = 0;  // server: the longest time between two reads that returned data
  bool mptcp = false;       // the socket is MPTCP and has not fallen back to TCP
  char error[200] = {};
};

}  // namespace

std::string rail_state(const std::string& node, const std::string& rail) {
  json p = dpctl(node, "path show " + rail);
  return p.is_object() && p["health"].is_object() ? p["health"]["state"].get<std::string>() : "?";
}

bool wait_rails_up(std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    bool all = true;
    for (const char* n : {"a", "b"})
      for (const char* r : {"rail0", "rail1"}) all = all && rail_state(n, r) == "up";
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string cgroup2_mount() {
  std::ifstream mounts("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest))
    if (type == "cgroup2") return dir;
  return "/sys/fs/cgroup";
}

// MPTCP_INFO answers only on an MPTCP socket that has not fallen back to TCP
// (its flags say so when it has).
bool is_mptcp(int fd) {
  struct {
    uint8_t subflows, add_addr_signal, add_addr_accepted, subflows_max, add_addr_signal_max,
        add_addr_accepted_max;
    uint32_t flags;
    uint8_t rest[256];
  } info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, SOL_MPTCP, dp::mptcp::kMptcpInfo, &info, &len) != 0) return false;
  return !(info.flags & dp::mptcp::kInfoFlagFallback);
}

namespace {

int stream_socket(const TransferSpec& s, int family) {
  return ::socket(family, SOCK_STREAM, s.mptcp ? IPPROTO_MPTCP : 0);
}

// Joins s.cgroup (relative to the cgroup v2 mount), if any.
bool join_cgroup(const TransferSpec& s) {
  if (s.cgroup.empty()) return true;
  FILE* f = std::fopen((cgroup2_mount() + s.cgroup + "/cgroup.procs").c_str(), "w");
  if (!f) return false;
  bool ok = std::fprintf(f, "0\n") > 0;
  return std::fclose(f) == 0 && ok;
}

uint64_t fnv(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
constexpr uint64_t kFnvInit = 0xcbf29ce484222325ull;

// A transfer that stalls (blackholed traffic) fails instead of hanging the test.
void set_timeouts(int fd) {
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

[[noreturn]] void finish(int fd, Wire& w, const char* err = nullptr) {
  if (err) snprintf(w.error, sizeof(w.error), "%s: %s", err, strerror(errno));
  (void)!::write(fd, &w, sizeof(w));
  _exit(0);
}

void run_server(const TransferSpec& s, int out, int ready) {
  Wire w;
  if (!join_cgroup(s)) finish(out, w, "server cgroup");
  if (!enter_netns(s.server_ns)) finish(out, w, "server setns");
  socklen_t len;
  bool v6 = s.dst.find(':') != std::string::npos;
  auto any = make_addr(!s.server_bind.empty() ? s.server_bind
                       : v6                   ? "::"
                                              : "0.0.0.0",
                       s.dport, &len);
  int l = ::socket(any.ss_family, SOCK_STREAM, s.mptcp && !s.server_tcp ? IPPROTO_MPTCP : 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(l, reinterpret_cast<sockaddr*>(&any), len) != 0) finish(out, w, "server bind");
  if (::listen(l, 1) != 0) finish(out, w, "server listen");
  char c = 1;
  (void)!::write(ready, &c, 1);
  set_timeouts(l);
  int fd = ::accept(l, nullptr, nullptr);
  if (fd < 0) finish(out, w, "server accept");
  set_timeouts(fd);
  w.sum = kFnvInit;
  std::vector<uint8_t> buf(1 << 16);
  std::optional<std::chrono::steady_clock::time_point> last;
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) finish(out, w, "server recv");
    if (n == 0) {
      w.mptcp = is_mptcp(fd);
      break;
    }
    auto now = std::chrono::steady_clock::now();
    if (last)
      w.max_gap_us = std::max<uint64_t>(
          w.max_gap_us,
          static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::microseconds>(now - *last).count()));
    last = now;
    w.sum = fnv(w.sum, buf.data(), static_cast<size_t>(n));
    w.bytes += static_cast<uint64_t>(n);
    if (s.server_us_per_kib > 0) {
      auto until = std::chrono::steady_clock::now() +
                   std::chrono::duration<double, std::micro>(s.server_us_per_kib *
                                                             static_cast<double>(n) / 1024);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
  }
  ::close(fd);
  finish(out, w);
}

// Whether the parent asked the client to stop sending (Transfer::stop):
// a byte, or the end of the pipe, on `stop`.
bool stop_asked(int stop) {
  char c;
  return stop >= 0 && ::read(stop, &c, 1) >= 0;
}

void run_client(const TransferSpec& s, int out, int stop) {
  Wire w;
  if (!join_cgroup(s)) finish(out, w, "client cgroup");
  if (!enter_netns(s.client_ns)) finish(out, w, "client setns");
  socklen_t len;
  auto dst = make_addr(s.dst, s.dport, &len);
  int fd = stream_socket(s, dst.ss_family);
  set_timeouts(fd);
  if (s.mark && setsockopt(fd, SOL_SOCKET, SO_MARK, &s.mark, sizeof(s.mark)) != 0)
    finish(out, w, "client SO_MARK");
  if (s.sport) {
    socklen_t sl;
    bool v6 = s.dst.find(':') != std::string::npos;
    auto src = make_addr(v6 ? "::" : "0.0.0.0", s.sport, &sl);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sl) != 0) finish(out, w, "client bind");
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), len) != 0) finish(out, w, "client connect");
  w.sum = kFnvInit;
  std::vector<uint8_t> buf(1 << 16);
  auto start = std::chrono::steady_clock::now();
  uint64_t pos = 0;
  while (pos < s.bytes && !stop_asked(stop)) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), s.bytes - pos));
    for (size_t i = 0; i < n; ++i)
      buf[i] = static_cast<uint8_t>(((pos + i) * 131 + (pos + i) / 65521) & 0xff);
    size_t off = 0;
    while (off < n) {
      ssize_t k = ::send(fd, buf.data() + off, n - off, MSG_NOSIGNAL);
      if (k < 0) finish(out, w, "client send");
      off += static_cast<size_t>(k);
    }
    w.sum = fnv(w.sum, buf.data(), n);
    pos += n;
    w.bytes = pos;
    if (s.rate_bps > 0) {
      auto due = start + std::chrono::duration<double>(static_cast<double>(pos) * 8 / s.rate_bps);
      std::this_thread::sleep_until(due);
    }
  }
  w.mptcp = is_mptcp(fd);
  ::shutdown(fd, SHUT_WR);
  while (::recv(fd, buf.data(), buf.size(), 0) > 0) {
  }
  ::close(fd);
  finish(out, w);
}

Wire read_wire(int fd, pid_t pid) {
  Wire w;
  ssize_t n = ::read(fd, &w, sizeof(w));
  if (n != static_cast<ssize_t>(sizeof(w))) snprintf(w.error, sizeof(w.error), "child died");
  ::waitpid(pid, nullptr, 0);
  ::close(fd);
  return w;
}

}  // namespace

Transfer::Transfer(TransferSpec s) : spec_(std::move(s)) {
  int sp[2], cp[2], rp[2], stop[2];
  if (pipe(sp) || pipe(cp) || pipe(rp)) return;
  if (pipe2(stop, O_CLOEXEC | O_NONBLOCK)) return;
  stop_ = stop[1];
  server_ = fork();
  if (server_ == 0) {
    ::close(sp[0]);
    ::close(rp[0]);
    ::close(stop[0]);
    ::close(stop[1]);
    run_server(spec_, sp[1], rp[1]);
  }
  ::close(sp[1]);
  ::close(rp[1]);
  server_pipe_ = sp[0];
  char c;
  if (::read(rp[0], &c, 1) != 1) {
    ::close(rp[0]);
    ::close(stop[0]);
    return;  // the server failed; wait() reports why
  }
  ::close(rp[0]);
  client_ = fork();
  if (client_ == 0) {
    ::close(cp[0]);
    ::close(stop[1]);
    run_client(spec_, cp[1], stop[0]);
  }
  ::close(cp[1]);
  ::close(stop[0]);
  client_pipe_ = cp[0];
}

void Transfer::stop() {
  if (stop_ < 0) return;
  // a byte, as a child forked later without exec holds the pipe open too
  if (::write(stop_, "x", 1) != 1)
    std::fprintf(stderr, "Transfer::stop: %s\n", std::strerror(errno));
  ::close(stop_);
  stop_ = -1;
}

TransferResult Transfer::wait() {
  TransferResult r;
  Wire c, s;
  if (client_pipe_ >= 0) {
    c = read_wire(client_pipe_, client_);
    client_pipe_ = -1;
  } else {
    snprintf(c.error, sizeof(c.error), "client not started");
  }
  if (server_pipe_ >= 0) {
    s = read_wire(server_pipe_, server_);
    server_pipe_ = -1;
  }
  r.sent = c.bytes;
  r.sent_sum = c.sum;
  r.received = s.bytes;
  r.received_sum = s.sum;
  r.max_gap_us = s.max_gap_us;
  r.client_mptcp = c.mptcp;
  r.server_mptcp = s.mptcp;
  if (s.error[0])
    r.error = std::string("server: ") + s.error;
  else if (c.error[0])
    r.error = std::string("client: ") + c.error;
  return r;
}

Transfer::~Transfer() {
  for (pid_t p : {client_, server_})
    if (p > 0 && ::waitpid(p, nullptr, WNOHANG) == 0) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
  if (client_pipe_ >= 0) ::close(client_pipe_);
  if (server_pipe_ >= 0) ::close(server_pipe_);
  if (stop_ >= 0) ::close(stop_);
}

TransferResult tcp_transfer(const TransferSpec& s) {
  Transfer t(s);
  return t.wait();
}

std::vector<double> ping_pong(const std::string& client_ns, const std::string& server_ns,
                              const std::string& dst, uint16_t port, int count, int size,
                              int pause_us) {
  int p[2], ready[2];
  if (pipe(p) || pipe(ready)) return {};
  pid_t server = fork();
  if (server == 0) {
    ::close(ready[0]);
    if (!enter_netns(server_ns)) _exit(1);
    socklen_t len;
    auto any = make_addr(dst.find(':') != std::string::npos ? "::" : "0.0.0.0", port, &len);
    int l = ::socket(any.ss_family, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(l, reinterpret_cast<sockaddr*>(&any), len) || ::listen(l, 1)) _exit(1);
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    int fd = ::accept(l, nullptr, nullptr);
    set_timeouts(fd);
    std::vector<char> buf(static_cast<size_t>(size));
    for (;;) {
      size_t got = 0;
      while (got < buf.size()) {
        ssize_t n = ::recv(fd, buf.data() + got, buf.size() - got, 0);
        if (n <= 0) _exit(0);
        got += static_cast<size_t>(n);
      }
      if (::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL) <= 0) _exit(0);
    }
  }
  ::close(ready[1]);
  char c;
  if (::read(ready[0], &c, 1) != 1) {
    ::close(ready[0]);
    ::waitpid(server, nullptr, 0);
    return {};
  }
  ::close(ready[0]);
  pid_t client = fork();
  if (client == 0) {
    ::close(p[0]);
    std::vector<double> rtts;
    if (enter_netns(client_ns)) {
      socklen_t len;
      auto to = make_addr(dst, port, &len);
      int fd = ::socket(to.ss_family, SOCK_STREAM, 0);
      set_timeouts(fd);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      if (::connect(fd, reinterpret_cast<sockaddr*>(&to), len) == 0) {
        std::vector<char> buf(static_cast<size_t>(size), 'p');
        for (int i = 0; i < count; ++i) {
          auto t = std::chrono::steady_clock::now();
          if (::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL) <= 0) break;
          size_t got = 0;
          while (got < buf.size()) {
            ssize_t n = ::recv(fd, buf.data() + got, buf.size() - got, 0);
            if (n <= 0) break;
            got += static_cast<size_t>(n);
          }
          if (got < buf.size()) break;
          rtts.push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t)
                  .count());
          if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
        }
      }
      ::close(fd);
    }
    size_t n = rtts.size();
    (void)!::write(p[1], &n, sizeof(n));
    if (n) (void)!::write(p[1], rtts.data(), n * sizeof(double));
    _exit(0);
  }
  ::close(p[1]);
  size_t n = 0;
  std::vector<double> out;
  if (::read(p[0], &n, sizeof(n)) == sizeof(n) && n > 0) {
    out.resize(n);
    size_t want = n * sizeof(double), got = 0;
    while (got < want) {
      ssize_t k = ::read(p[0], reinterpret_cast<char*>(out.data()) + got, want - got);
      if (k <= 0) break;
      got += static_cast<size_t>(k);
    }
    if (got < want) out.clear();
  }
  ::close(p[0]);
  ::waitpid(client, nullptr, 0);
  ::kill(server, SIGKILL);
  ::waitpid(server, nullptr, 0);
  return out;
}

void udp_flows(const std::string& ns, const std::string& src, const std::string& dst,
               uint16_t dport, uint16_t first_sport, int flows, double seconds) {
  pid_t pid = fork();
  if (pid == 0) {
    rlimit rl{static_cast<rlim_t>(flows + 64), static_cast<rlim_t>(flows + 64)};
    setrlimit(RLIMIT_NOFILE, &rl);
    if (!enter_netns(ns)) _exit(1);
    std::vector<int> fds;
    socklen_t len;
    auto to = make_addr(dst, dport, &len);
    for (int i = 0; i < flows; ++i) {
      int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
      socklen_t sl;
      auto from = make_addr(src, static_cast<uint16_t>(first_sport + i), &sl);
      if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&from), sl) != 0) _exit(2);
      fds.push_back(fd);
    }
    char msg[64] = {};
    auto start = std::chrono::steady_clock::now();
    for (int round = 0;
         std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds);
         ++round) {
      for (int fd : fds)
        (void)::sendto(fd, msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&to), len);
      std::this_thread::sleep_until(start + (round + 1) * std::chrono::seconds(1));
    }
    _exit(0);
  }
  ::waitpid(pid, nullptr, 0);
}

pid_t spawn_in_ns(const std::string& ns, const std::vector<std::string>& argv,
                  const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (!enter_netns(ns)) _exit(127);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void stop_child(pid_t pid, int timeout_ms) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  for (int waited = 0; waited < timeout_ms; waited += 50) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

UdpStreamResult udp_stream(const std::string& client_ns, const std::string& server_ns,
                           const std::string& dst, uint16_t dport, double seconds, int pps,
                           int size) {
  UdpStreamResult out;
  const auto total = static_cast<uint32_t>(seconds * pps);
  const bool v6 = dst.find(':') != std::string::npos;
  size = std::max(size, 8);
  int ready[2] = {-1, -1}, rx[2] = {-1, -1}, tx[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {ready[0], ready[1], rx[0], rx[1], tx[0], tx[1]})
      if (fd >= 0) ::close(fd);
  };
  if (pipe(ready) || pipe(rx) || pipe(tx)) {
    close_all();
    return {0, 0, 0, 0, 0, "pipe failed"};
  }
  struct Rx {
    uint64_t received = 0, max_gap_us = 0, tail_received = 0;
    int ok = 0;
  };
  pid_t receiver = fork();
  if (receiver == 0) {
    Rx r;
    socklen_t len;
    auto any = make_addr(v6 ? "::" : "0.0.0.0", dport, &len);
    int fd = enter_netns(server_ns) ? ::socket(any.ss_family, SOCK_DGRAM, 0) : -1;
    timeval tv{0, 100'000};
    r.ok = fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
           ::bind(fd, reinterpret_cast<sockaddr*>(&any), len) == 0;
    (void)!::write(ready[1], &r.ok, sizeof(r.ok));
    std::vector<bool> seen(total, false);
    auto last = std::chrono::steady_clock::time_point{};
    // the sender's time, a second more, and a second for its start
    auto end = std::chrono::steady_clock::now() +
               std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)) +
               std::chrono::seconds(2);
    std::vector<uint8_t> buf(static_cast<size_t>(size) + 64);
    while (r.ok && r.received < total && std::chrono::steady_clock::now() < end) {
      ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n < 8) continue;
      uint32_t seq;
      std::memcpy(&seq, buf.data(), sizeof(seq));
      if (seq >= total || seen[seq]) continue;
      seen[seq] = true;
      auto now = std::chrono::steady_clock::now();
      if (last != std::chrono::steady_clock::time_point{})
        r.max_gap_us = std::max<uint64_t>(
            r.max_gap_us,
            std::chrono::duration_cast<std::chrono::microseconds>(now - last).count());
      last = now;
      ++r.received;
      r.tail_received += seq >= total - total / 5;
    }
    (void)!::write(rx[1], &r, sizeof(r));
    _exit(0);
  }
  if (receiver < 0) {
    close_all();
    return {0, 0, 0, 0, 0, "fork failed"};
  }
  // the write ends the children use: closed here, so that a read sees the
  // end of a child that died before it wrote
  ::close(ready[1]);
  ::close(rx[1]);
  ready[1] = rx[1] = -1;
  int ok = 0;
  (void)!::read(ready[0], &ok, sizeof(ok));
  pid_t sender = -1;
  if (ok) sender = fork();
  if (sender == 0) {
    uint64_t sent = 0;
    if (enter_netns(client_ns)) {
      socklen_t len;
      auto to = make_addr(dst, dport, &len);
      int fd = ::socket(to.ss_family, SOCK_DGRAM, 0);
      std::vector<uint8_t> buf(static_cast<size_t>(size), 0x5a);
      const auto step = std::chrono::nanoseconds(1'000'000'000 / std::max(pps, 1));
      auto at = std::chrono::steady_clock::now();
      for (uint32_t seq = 0; fd >= 0 && seq < total; ++seq, at += step) {
        std::this_thread::sleep_until(at);
        std::memcpy(buf.data(), &seq, sizeof(seq));
        // a full queue or a route being replaced refuses one: it counts as lost
        sent += ::sendto(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&to), len) > 0;
      }
    }
    (void)!::write(tx[1], &sent, sizeof(sent));
    _exit(0);
  }
  ::close(tx[1]);
  tx[1] = -1;
  if (sender > 0) {
    (void)!::read(tx[0], &out.sent, sizeof(out.sent));
    ::waitpid(sender, nullptr, 0);
  } else {
    out.error =
        ok ? "fork failed" : "the receiver could not bind UDP port " + std::to_string(dport);
    ::kill(receiver, SIGKILL);
  }
  Rx r;
  if (::read(rx[0], &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r))) {
    out.received = r.received;
    out.max_gap_us = r.max_gap_us;
    out.tail_received = r.tail_received;
  }
  ::waitpid(receiver, nullptr, 0);
  close_all();
  out.tail_sent = total / 5;
  return out;
}

int udp_send(const std::string& ns, const std::string& dst, uint16_t dport, uint16_t sport,
             int count, int size, uint32_t mark) {
  int p[2];
  if (pipe(p)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    int sent = 0;
    if (enter_netns(ns)) {
      socklen_t len;
      auto to = make_addr(dst, dport, &len);
      int fd = ::socket(to.ss_family, SOCK_DGRAM, 0);
      if (mark) setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark));
      if (sport) {
        socklen_t sl;
        auto src = make_addr(dst.find(':') != std::string::npos ? "::" : "0.0.0.0", sport, &sl);
        (void)::bind(fd, reinterpret_cast<sockaddr*>(&src), sl);
      }
      std::vector<uint8_t> buf(static_cast<size_t>(size), 0x5a);
      for (int i = 0; i < count; ++i)
        if (::sendto(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&to), len) > 0) {
          ++sent;
          if (i % 64 == 63) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }
    (void)!::write(p[1], &sent, sizeof(sent));
    _exit(0);
  }
  ::close(p[1]);
  int sent = -1;
  (void)!::read(p[0], &sent, sizeof(sent));
  ::close(p[0]);
  ::waitpid(pid, nullptr, 0);
  return sent;
}

}  // namespace lab
