// SPDX-License-Identifier: Apache-2.0
// What a rail failure costs established connections of multipath classes
// (dualpath-policy(5), "multipath"), against plain TCP connections of the
// same run. Each trial runs, from dpl-a to b's rail0 address (the separate
// topology) or b's one address (--topology shared), on rail0:
//   - a multipath latency-sensitive stream (class collective-ls, prefer rail0:
//     its rail1 subflow a backup; in the lab HTB's priority leaf, as the lab
//     policies' latency-sensitive classes are) and a multipath elastic stream
//     (class collective), each paced at 20 Mbit/s in 64 KiB writes;
//   - a plain TCP latency-sensitive stream (expert-dispatch), paced the same:
//     what the same fault does to a connection that cannot move (separate),
//     or that the datapath moves (shared).
// With --busy, rail0 is also full: a plain TCP line-rate expert-dispatch stream.
// One second in, the fault, cleared 1.5 s later:
//   blackhole - rail0's router drops everything, both ways (carrier stays up;
//               shared: both nodes drop what arrives on rail0);
//   carrier   - b's rail0 loses its carrier (`ip link set rail0 down` in b).
// The shared lab runs BFD (500 ms x 3) between the daemons; the separate
// one's rails are routed.
// Measured at each receiver: the longest gap between reads that returned
// data (what the application sees), and whether every byte arrived intact
// (FNV-1a over the stream) or the connection was reset.
// Hold-down 1 s and ramp steps of 100 ms so that trials follow quickly.
//
//   build/tests/bench/dp-bench-multipath [--trials N] [--faults blackhole,carrier] [--busy]
//                                        [--topology separate|shared]
//
// Needs root and the lab down; brings the lab up and down.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <regex>
#include <thread>

#include "../lab/lab_fixture.h"

using namespace lab;
using namespace std::chrono_literals;

namespace {

const char* g_peer = "10.10.2.2";  // b on rail0 (separate), b (shared)
bool g_shared = false;
const char* kCgroups[] = {"/dpl-collective", "/dpl-collective-ls"};

struct Stats {
  std::vector<double> v;
  void add(double x) { v.push_back(x); }
  double pct(double p) const {
    if (v.empty()) return -1;
    auto s = v;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1,
                      static_cast<size_t>(p * static_cast<double>(s.size() - 1) + 0.5))];
  }
  double max() const { return v.empty() ? -1 : *std::max_element(v.begin(), v.end()); }
};

struct Stream {
  const char* name;
  Stats gap{};  // ms, of the transfers that delivered every byte
  int intact = 0, reset = 0, other = 0;
};

// Ended: reset, aborted (SOCK_DESTROY), or a receiver left waiting for a
// sender that was ended (its 20 s receive timeout: the reset never reached it).
bool is_reset(const TransferResult& r) {
  for (const char* e : {"reset", "Broken pipe", "abort", "Resource temporarily unavailable"})
    if (r.error.find(e) != std::string::npos) return true;
  return false;
}

void record(Stream& s, const TransferResult& r) {
  if (r.ok()) {
    ++s.intact;
    s.gap.add(static_cast<double>(r.max_gap_us) / 1000);
  } else if (is_reset(r)) {
    ++s.reset;
  } else {
    ++s.other;
    std::fprintf(stderr, "  %s: %s (sent %llu, received %llu)\n", s.name, r.error.c_str(),
                 static_cast<unsigned long long>(r.sent),
                 static_cast<unsigned long long>(r.received));
  }
}

TransferSpec stream(uint16_t port, const char* cgroup, uint64_t bytes, double rate) {
  TransferSpec t;
  t.dst = g_peer;
  t.server_bind = g_peer;
  t.dport = port;
  t.bytes = bytes;
  t.rate_bps = rate;
  if (cgroup) {
    t.cgroup = cgroup;
    t.mptcp = true;
  }
  return t;
}

// The time of day (UTC, to the millisecond) as the daemons' logs show it: a
// trial's fault, to read beside dpl-a.log and dpl-b.log.
std::string time_of_day() {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count()));
  return buf;
}

struct Fault {
  const char* name;
  std::function<void()> inject, clear;
};

std::vector<Fault> faults() {
  if (g_shared)
    return {
        {"blackhole",
         [] {
           for (const char* ns : {"dpl-a", "dpl-b"}) attach_drop(ns, "rail0", 100000);
         },
         [] {
           for (const char* ns : {"dpl-a", "dpl-b"}) attach_drop(ns, "rail0", 0, true);
         }},
        {"carrier", [] { must(nsenter("dpl-b") + "ip link set rail0 down"); },
         [] {
           must(nsenter("dpl-b") + "ip link set rail0 up");
           restore_lab_routes("dpl-b");
           restore_lab_routes("dpl-a");
         }},
    };
  return {
      {"blackhole",
       [] {
         for (const char* dev : {"to-a", "to-b"}) attach_drop("dpl-r0", dev, 100000);
       },
       [] {
         for (const char* dev : {"to-a", "to-b"}) attach_drop("dpl-r0", dev, 0, true);
       }},
      {"carrier", [] { must(nsenter("dpl-b") + "ip link set rail0 down"); },
       [] {
         must(nsenter("dpl-b") + "ip link set rail0 up");
         sh(nsenter("dpl-b") + "ip route replace 10.10.0.0/16 via 10.10.2.254 dev rail0");
         sh(nsenter("dpl-b") + "ip -6 route replace fd10::/32 via fd10:0:2::fe dev rail0");
       }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dualpath multipath failover benchmark"};
  int trials = 20;
  std::string only, topology = "separate";
  bool busy = false;
  app.add_option("--trials", trials, "trials of each fault")->capture_default_str();
  app.add_option("--faults", only, "comma-separated faults to run (blackhole, carrier)");
  app.add_flag("--busy", busy, "a line-rate plain TCP stream on rail0 beside the others");
  std::string reserve;
  app.add_option("--reserve", reserve,
                 "give both multipath classes this reserve, a rate or a share of a rail "
                 "(dualpath-policy(5)), e.g. 10%");
  app.add_option("--topology", topology, "separate or shared")
      ->check(CLI::IsMember({"shared", "separate"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  g_shared = topology == "shared";
  if (g_shared) g_peer = "10.99.0.2";

  for (const char* cg : kCgroups) std::filesystem::create_directories(cgroup2_mount() + cg);
  Env env;
  env.topology = topology;
  env.edit = [reserve](const std::string& text) {
    std::string r = reserve.empty() ? "" : "reserve = \"" + reserve + "\"\n";
    return std::regex_replace(text, std::regex("holddown = \"5m\""),
                              "holddown = \"1s\"\nramp_interval = \"100ms\"") +
           "\n[[class]]\nname = \"collective\"\nkind = \"elastic\"\npriority = 4\n"
           "prefer = \"rail0\"\nmultipath = true\ncgroups = [\"/dpl-collective\"]\n" +
           r +
           "\n[[class]]\nname = \"collective-ls\"\nkind = \"latency_sensitive\"\npriority = 6\n"
           "prefer = \"rail0\"\nmultipath = true\ncgroups = [\"/dpl-collective-ls\"]\n"
           "skb_priority = \"1:10\"\n" +
           r;
  };
  env.prepare = [] {
    // the drop filters' clsact: on rail0's router, or on b's rails (shared:
    // dualpathd adds its own on a's)
    if (g_shared)
      for (const char* dev : {"rail0", "rail1"})
        must(nsenter("dpl-b") + "tc qdisc add dev " + dev + " clsact");
    else
      for (const char* dev : {"to-a", "to-b"})
        must(nsenter("dpl-r0") + "tc qdisc add dev " + dev + " clsact");
    return std::string();
  };
  env.SetUp();
  if (!g_skip.empty()) {
    std::fprintf(stderr, "cannot run: %s\n", g_skip.c_str());
    env.TearDown();
    return 1;
  }
  auto list = faults();
  struct PerFault {
    Stream mp_ls{"multipath LS"}, mp_el{"multipath elastic"}, tcp_ls{"plain TCP LS"},
        busy{"plain TCP line-rate"};
    int trials = 0;
  };
  std::vector<PerFault> stats(list.size());
  int not_up = 0;
  constexpr double kRate = 20e6;
  const uint64_t bytes = static_cast<uint64_t>(kRate / 8 * 4);  // 4 s
  for (int t = 0; t < trials; ++t) {
    for (size_t f = 0; f < list.size(); ++f) {
      if (!only.empty() && only.find(list[f].name) == std::string::npos) continue;
      if (!wait_rails_up(30s)) ++not_up;
      auto& st = stats[f];
      ++st.trials;
      Transfer ls(stream(45301, kCgroups[1], bytes, kRate));
      Transfer el(stream(45302, kCgroups[0], bytes, kRate));
      Transfer tcp(stream(50301, nullptr, bytes, kRate));
      std::optional<Transfer> full;
      if (busy) full.emplace(stream(50302, nullptr, 400u << 20, 0));
      std::this_thread::sleep_for(1000ms);
      std::string at = time_of_day();
      list[f].inject();
      std::this_thread::sleep_for(1500ms);
      list[f].clear();
      auto a = ls.wait(), b = el.wait(), c = tcp.wait();
      record(st.mp_ls, a);
      record(st.mp_el, b);
      record(st.tcp_ls, c);
      if (full) record(st.busy, full->wait());
      std::fprintf(
          stderr, "  %s at %s: multipath gaps %.0f / %.0f ms%s%s; plain TCP %s\n", list[f].name,
          at.c_str(), static_cast<double>(a.max_gap_us) / 1000,
          static_cast<double>(b.max_gap_us) / 1000, a.ok() ? "" : (" LS: " + a.error).c_str(),
          b.ok() ? "" : (" elastic: " + b.error).c_str(), c.ok() ? "intact" : c.error.c_str());
    }
    std::fprintf(stderr, "trial %d/%d done\n", t + 1, trials);
  }
  wait_rails_up(30s);
  env.TearDown();
  for (const char* cg : kCgroups) {
    std::error_code ec;
    std::filesystem::remove(cgroup2_mount() + cg, ec);
  }

  std::printf(
      "\nmultipath failover, %s topology: %d trials of each fault; streams paced at 20 "
      "Mbit/s in 64 KiB writes%s\n",
      topology.c_str(), trials,
      busy ? "; rail0 busy: a line-rate plain TCP stream beside them" : "");
  if (!reserve.empty())
    std::printf("both multipath classes have reserve = \"%s\"\n", reserve.c_str());
  std::printf("%-10s %-22s %7s %6s %6s %9s %9s %9s  %s\n", "fault", "stream", "intact", "ended",
              "other", "gap p50", "gap p99", "gap max", "goal (p99)");
  for (size_t f = 0; f < list.size(); ++f) {
    auto& st = stats[f];
    if (!st.trials) continue;
    auto line = [&](const Stream& s, const char* goal) {
      std::printf("%-10s %-22s %4d/%-2d %6d %6d %9.1f %9.1f %9.1f  %s\n", list[f].name, s.name,
                  s.intact, st.trials, s.reset, s.other, s.gap.pct(0.5), s.gap.pct(0.99),
                  s.gap.max(), goal);
    };
    line(st.mp_ls, "0 resets, <= 300 ms");
    line(st.mp_el, "0 resets, <= 500 ms");
    line(st.tcp_ls, g_shared ? "(moved by the datapath)" : "(today's: ended, reconnects)");
    if (busy) line(st.busy, "");
  }
  std::printf("gaps in ms, of the transfers that delivered every byte intact\n");
  std::printf("trials that began with a rail not up: %d\n", not_up);
  return 0;
}
