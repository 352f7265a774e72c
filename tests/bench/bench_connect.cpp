// SPDX-License-Identifier: Apache-2.0
// What connect-time placement adds to one connect(): the separate lab
// (tools/dp-lab up --topology separate), a UDP socket in node a connecting
// to b's rail1 address on an expert-dispatch port (a class the policy puts on
// rail0, so the program classifies, places, rewrites the address and records
// it for getpeername), with dualpathd's programs attached and without
// (dp-lab stop a removes them), alternating A B B A. UDP's connect() runs the
// same cgroup/connect4 hook as TCP's without a handshake to time.
//
// With --accept, what the receiving node's sk_lookup handover adds to a TCP
// connection: a's programs off, a server in b bound to b's rail0 address (as
// gloo and NCCL bind theirs), whole TCP connects (the handshake over the lab's
// unshaped rails) from a to that address with b's programs attached (sk_lookup
// runs and passes: the address asked for has its listener) and without, and
// to b's rail1 address with them (sk_lookup hands the SYN to the rail0
// listener; without them that connect is refused); and with b's programs but
// its sk_lookup link detached, so that sk_lookup's part of what b's programs
// add shows. Then, with the kernel's BPF run-time statistics on (only for
// that part: they cost every program run), what each of b's programs costs
// per connect, passing and handing over, and per UDP datagram to a UDP
// server bound the same way (sk_lookup runs for every datagram).
//
//   build/tests/bench/dp-bench-connect [--connects N] [--rounds R] [--accept]
//
// Needs root; brings the lab up and takes it down.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../lab/lab_fixture.h"

namespace {

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

sockaddr_in v4(const char* addr, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, addr, &a.sin_addr);
  return a;
}

// connect() durations in ns, from node a to dst:port.
std::vector<double> time_connects(const char* dst, uint16_t port, int n, std::string* peer) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(n));
  lab::in_netns("dpl-a", [&]() -> std::string {
    sockaddr_in to = v4(dst, port);
    for (int i = 0; i < n; ++i) {
      int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
      uint64_t t0 = now_ns();
      int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));
      uint64_t t1 = now_ns();
      if (rc == 0) out.push_back(static_cast<double>(t1 - t0));
      if (i == 0) {
        sockaddr_in me{};
        socklen_t ml = sizeof(me);
        getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml);
        char buf[INET_ADDRSTRLEN];
        *peer = inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf));
      }
      ::close(fd);
    }
    return "";
  });
  return out;
}

// Whole TCP connects from a to dst:port, each closed at once with a reset
// (no TIME_WAIT piles up), in ns; failures counted in *refused.
std::vector<double> time_tcp_connects(const char* dst, uint16_t port, int n, int* refused) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(n));
  lab::in_netns("dpl-a", [&]() -> std::string {
    sockaddr_in to = v4(dst, port);
    for (int i = 0; i < n; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      linger lg{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      uint64_t t0 = now_ns();
      int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));
      uint64_t t1 = now_ns();
      if (rc == 0)
        out.push_back(static_cast<double>(t1 - t0));
      else
        ++*refused;
      ::close(fd);
    }
    return "";
  });
  return out;
}

// A server in b bound to one address: TCP accepts and closes, UDP echoes
// every datagram, until stopped.
class Server {
 public:
  Server(const char* addr, uint16_t port, int type = SOCK_STREAM) {
    lab::in_netns("dpl-b", [&]() -> std::string {
      fd_ = ::socket(AF_INET, type, 0);
      int one = 1;
      ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in me = v4(addr, port);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&me), sizeof(me)) != 0 ||
          (type == SOCK_STREAM && ::listen(fd_, 4096)))
        return "bind";
      return "";
    });
    th_ = std::thread([this, type] {
      char buf[2048];
      for (;;) {
        if (type == SOCK_STREAM) {
          int c = ::accept(fd_, nullptr, nullptr);
          if (c < 0) return;
          ::close(c);
          continue;
        }
        sockaddr_in from{};
        socklen_t fl = sizeof(from);
        ssize_t n = ::recvfrom(fd_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
        if (n <= 0) return;  // shut down
        (void)::sendto(fd_, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), fl);
      }
    });
  }
  ~Server() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes an unconnected UDP socket's recvfrom too
    th_.join();
    ::close(fd_);
  }

 private:
  int fd_ = -1;
  std::thread th_;
};

// n datagrams of 64 bytes from a connected UDP socket in a to dst:port, each
// waiting for its echo (at most 200 ms); returns the echoes.
int udp_round_trips(const char* dst, uint16_t port, int n) {
  int echoed = 0;
  lab::in_netns("dpl-a", [&]() -> std::string {
    sockaddr_in to = v4(dst, port);
    int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    timeval tv{0, 200000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) return "connect";
    char buf[64] = {};
    for (int i = 0; i < n; ++i)
      if (::send(fd, buf, sizeof(buf), 0) > 0 && ::recv(fd, buf, sizeof(buf), 0) > 0) ++echoed;
    ::close(fd);
    return "";
  });
  return echoed;
}

// Run time and runs of every loaded BPF program named dp_* (b's: a's are
// stopped), by name, from the kernel's statistics.
struct ProgStats {
  uint64_t ns = 0, runs = 0;
};
std::map<std::string, ProgStats> prog_stats() {
  std::map<std::string, ProgStats> out;
  uint32_t id = 0;
  while (bpf_prog_get_next_id(id, &id) == 0) {
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
        std::string(info.name).rfind("dp_", 0) == 0) {
      auto& p = out[info.name];
      p.ns += info.run_time_ns;
      p.runs += info.run_cnt;
    }
    ::close(fd);
  }
  return out;
}

// A table of b's programs from the kernel's statistics: per `unit` (connect,
// datagram) over n of them, in two variants (passing, handing over).
void per_program(const char* const heads[2], const char* unit, std::map<std::string, ProgStats>& a,
                 std::map<std::string, ProgStats>& b, int n) {
  std::printf("| program | %s: runs/%s | ns/run | ns/%s | %s: runs/%s | ns/run | ns/%s |\n",
              heads[0], unit, unit, heads[1], unit, unit);
  std::printf("|---|---|---|---|---|---|---|\n");
  std::map<std::string, int> names;
  for (auto& [name, _] : a) names[name];
  for (auto& [name, _] : b) names[name];
  double total[2] = {0, 0};
  for (auto& [name, _] : names) {
    std::printf("| %s", name.c_str());
    int w = 0;
    for (auto* m : {&a, &b}) {
      ProgStats d = (*m)[name];
      double per = static_cast<double>(d.ns) / n;
      total[w++] += per;
      std::printf(" | %.2f | %.0f | %.0f", static_cast<double>(d.runs) / n,
                  d.runs ? static_cast<double>(d.ns) / static_cast<double>(d.runs) : 0.0, per);
    }
    std::printf(" |\n");
  }
  std::printf("| all | | | %.0f | | | %.0f |\n", total[0], total[1]);
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dp-bench-connect: what connect-time placement adds to connect()"};
  int connects = 100000, rounds = 4;
  std::string dst = "10.20.2.2";
  app.add_option("--connects", connects, "connect() calls per measurement")->capture_default_str();
  app.add_option("--rounds", rounds, "rounds of A B B A")->capture_default_str();
  app.add_option("--dst", dst, "destination: b's rail1 address (rewritten) or rail0 address (kept)")
      ->capture_default_str();
  bool accept = false;
  app.add_flag("--accept", accept,
               "instead: what b's sk_lookup handover adds to a whole TCP connect");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "dp-bench-connect needs root\n");
    return 1;
  }
  if (lab::sh("ip netns list").out.find("dpl-a") != std::string::npos) {
    std::fprintf(stderr, "a lab is up; take it down first (tools/dp-lab down)\n");
    return 1;
  }
  setenv("DP_BUILD", DP_BUILD_DIR, 1);
  if (lab::sh(lab::dp_lab() + " up --topology separate --no-shaping").rc != 0) {
    std::fprintf(stderr, "dp-lab up --topology separate failed\n");
    return 1;
  }
  if (accept) {
    // a's connect-time placement off throughout; b's programs on and off
    lab::sh(lab::dp_lab() + " stop a");
    std::vector<double> direct_on, direct_off, direct_no_lookup, handed;
    int refused_on = 0, refused_off = 0, refused_no_lookup = 0, refused_handed = 0,
        refused_moved_off = 0;
    const uint16_t port = 51000;  // expert-combine's
    const std::string pin = "/sys/fs/bpf/dualpath/dpl-b/link_sk_lookup";
    enum Variant { kOn, kOff, kNoLookup };
    auto phase = [&](Variant v) {
      if (v == kOff) {
        lab::sh(lab::dp_lab() + " stop b");
      } else {
        lab::sh(lab::dp_lab() + " start b");
        if (v == kNoLookup)
          lab::sh("rm " + pin);  // the daemon holds no link fd: this detaches it
        else
          lab::dpctl("b", "policy reload");  // attaches it again where it went
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      Server server("10.10.2.2", port);  // after b's sockops: its listener is known
      std::vector<double>& into = v == kOn ? direct_on : v == kOff ? direct_off : direct_no_lookup;
      int* refused = v == kOn ? &refused_on : v == kOff ? &refused_off : &refused_no_lookup;
      auto t = time_tcp_connects("10.10.2.2", port, connects, refused);
      into.insert(into.end(), t.begin(), t.end());
      if (v == kOn) {
        auto h = time_tcp_connects("10.20.2.2", port, connects, &refused_handed);
        handed.insert(handed.end(), h.begin(), h.end());
      } else if (v == kOff) {
        time_tcp_connects("10.20.2.2", port, 100, &refused_moved_off);
      }
    };
    for (int r = 0; r < rounds; ++r)
      for (Variant v : {kOn, kNoLookup, kOff, kOff, kNoLookup, kOn}) phase(v);

    // per program, with the kernel's run-time statistics on (while the fd is open)
    phase(kOn);
    std::map<std::string, ProgStats> passing, handing, udp_passing, udp_handing;
    int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
    const int stat_connects = std::min(connects, 20000);
    int echoed[2] = {0, 0};
    if (stats_fd >= 0) {
      auto count = [](std::map<std::string, ProgStats>& into, const auto& run) {
        auto before = prog_stats();
        run();
        auto after = prog_stats();
        for (auto& [name, a] : after) {
          ProgStats d{a.ns - before[name].ns, a.runs - before[name].runs};
          if (d.runs) into[name] = d;
        }
      };
      {
        Server server("10.10.2.2", port);
        int dummy = 0;
        for (int which = 0; which < 2; ++which)
          count(which ? handing : passing, [&] {
            time_tcp_connects(which ? "10.20.2.2" : "10.10.2.2", port, stat_connects, &dummy);
          });
      }
      // UDP: sk_lookup runs for every datagram, and b's recvmsg and sendmsg
      // programs for each echo (expert-combine's port is a UDP class port too)
      Server echo("10.10.2.2", port, SOCK_DGRAM);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // b's tick finds it
      for (int which = 0; which < 2; ++which)
        count(which ? udp_handing : udp_passing, [&] {
          echoed[which] = udp_round_trips(which ? "10.20.2.2" : "10.10.2.2", port, stat_connects);
        });
      ::close(stats_fd);
    }
    lab::sh(lab::dp_lab() + " down");

    std::printf(
        "whole TCP connects from a to a server in b bound to b's rail0 address (10.10.2.2:%u),\n"
        "%d rounds of A C B B C A, %d connects each, a's programs off\n\n",
        port, rounds, connects);
    std::printf("| variant | connects | refused | median | p99 |\n|---|---|---|---|---|\n");
    auto row = [](const char* what, const std::vector<double>& v, int refused) {
      std::printf("| %s | %zu | %d | %.0f ns | %.0f ns |\n", what, v.size(), refused, pct(v, 0.5),
                  pct(v, 0.99));
    };
    auto added = [](const char* what, const std::vector<double>& a, const std::vector<double>& b) {
      std::printf("| %s | | | %+.0f ns | %+.0f ns |\n", what, pct(a, 0.5) - pct(b, 0.5),
                  pct(a, 0.99) - pct(b, 0.99));
    };
    row("(B) to 10.10.2.2, b without its programs", direct_off, refused_off);
    row("(C) to 10.10.2.2, b's programs without sk_lookup", direct_no_lookup, refused_no_lookup);
    row("(A) to 10.10.2.2, b's programs, sk_lookup passes", direct_on, refused_on);
    row("(A) to 10.20.2.2, b's programs, sk_lookup hands over", handed, refused_handed);
    added("added by sk_lookup passing (A - C)", direct_on, direct_no_lookup);
    added("added by b's programs with sk_lookup passing (A - B)", direct_on, direct_off);
    added("added by a handover (A handed - B)", handed, direct_off);
    std::printf("\nto 10.20.2.2 without b's programs: %d of %d refused\n", refused_moved_off,
                100 * rounds * 2);
    if (stats_fd < 0) {
      std::printf("\nno BPF run-time statistics (BPF_ENABLE_STATS: %s)\n", std::strerror(errno));
      return 0;
    }
    std::printf(
        "\nb's programs per connect, from the kernel's run-time statistics (%d connects each;\n"
        "the statistics add their own cost to every run)\n\n",
        stat_connects);
    const char* const tcp_heads[2] = {"passing", "handing over"};
    per_program(tcp_heads, "connect", passing, handing, stat_connects);
    // UDP: to a server bound to b's rail0 address, addressed to it
    // (sk_lookup passes) and to b's rail1 address (handed over), each echoed
    std::printf(
        "\nb's programs per UDP datagram to a server bound to 10.10.2.2 (%d round trips each, "
        "%d and %d echoed; the statistics add their own cost)\n\n",
        stat_connects, echoed[0], echoed[1]);
    const char* const udp_heads[2] = {"to 10.10.2.2", "to 10.20.2.2, handed over"};
    per_program(udp_heads, "datagram", udp_passing, udp_handing, stat_connects);
    return 0;
  }
  std::vector<double> with, without;
  std::string local_with, local_without;
  auto measure = [&](bool on) {
    lab::sh(lab::dp_lab() + (on ? " start a" : " stop a"));
    auto v = time_connects(dst.c_str(), 50000, connects, on ? &local_with : &local_without);
    (on ? with : without).insert((on ? with : without).end(), v.begin(), v.end());
  };
  for (int r = 0; r < rounds; ++r)
    for (bool on : {true, false, false, true}) measure(on);
  lab::sh(lab::dp_lab() + " down");
  std::printf(
      "connect() of a UDP socket toward b's rail1 address (expert-dispatch, placed on rail0)\n"
      "%d rounds of A B B A, %d connects each; local address with: %s, without: %s\n\n",
      rounds, connects, local_with.c_str(), local_without.c_str());
  std::printf("| variant | connects | median | p99 |\n|---|---|---|---|\n");
  std::printf("| without the programs | %zu | %.0f ns | %.0f ns |\n", without.size(),
              pct(without, 0.5), pct(without, 0.99));
  std::printf("| with connect-time placement | %zu | %.0f ns | %.0f ns |\n", with.size(),
              pct(with, 0.5), pct(with, 0.99));
  std::printf("| added | | %.0f ns | %.0f ns |\n", pct(with, 0.5) - pct(without, 0.5),
              pct(with, 0.99) - pct(without, 0.99));
  return 0;
}
