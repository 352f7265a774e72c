// SPDX-License-Identifier: Apache-2.0
// What a failed rail costs the application, and how fast the daemon acts: trials
// of each fault in the lab, with the default BFD timers (500 ms x 3). In every
// trial, before the fault, three things run on rail0: an expert-dispatch
// stream (latency-sensitive), an expert-combine stream (elastic), each paced
// at 20 Mbit/s, and a control request/response stream (latency-sensitive,
// 256 bytes each way, a request every 2 ms). One second in, the fault:
//   blackhole - everything arriving on rail0 dropped, at both nodes;
//   one way   - only what arrives at the peer (a -> b);
//   loss 30%  - 30% of what arrives on rail0 dropped, at both nodes;
//   carrier   - `ip link set rail0 down` at the peer (a sees no carrier);
//   restart   - the blackhole, with node a's daemon killed (SIGKILL) 100 ms
//               after it suspected rail0 and started again 300 ms later:
//               what a restart in the middle of a failover adds;
//   none      - no fault: the baseline of the same measures.
// Measured, per fault: fault to the latency-sensitive classes' decisions
// leaving rail0 (the daemon); the longest gap in delivered bytes at each
// stream's receiver, and the longest request/response round trip (the
// application); connections reset or lost (must be 0). The streams send in
// 64 KiB writes, so the baseline gap is one write's time at 20 Mbit/s (~26
// ms). Also: carrier, netlink event to decision map (inside the daemon), and
// an idle blackhole, fault to BFD declaring the rail down.
// With --busy, the failing rail is also full: an unpaced expert-dispatch
// stream (latency-sensitive) runs beside the others at line rate, and its
// longest gap is measured too.
// The hold-down is 1 s and the ramp 100 ms steps so that trials follow
// quickly; those do not change the detection being measured.
//
//   build/tests/bench/dp-bench-failover [--trials N] [--faults a,b,...] [--busy]
//                                       [--reserve R] [--rto-min D]
//                                       [--topology shared|separate]
//
// --topology separate: each rail its own network. There a connection lives
// on its rail's addresses, and a failed rail's connections are ended, so the
// streams reconnect at once when theirs ends (as an HTTP client does), and
// what is measured is the longest gap in what reaches b across connections
// and when a new connection's first byte arrived; no RPC stream (it would
// end with its connection) and no BFD (the rails are routed).
//
// Needs root and the lab down; brings the lab up (tools/dp-lab) and down.
#include <signal.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <regex>
#include <thread>

#include "../lab/lab_fixture.h"

using namespace lab;
using namespace std::chrono_literals;

namespace {

int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t last_event() {
  json e = dpctl("a", "events");
  return e.is_object() ? e.value("last", uint64_t{0}) : 0;
}

json events_since(uint64_t since) {
  json e = dpctl("a", "events --since " + std::to_string(since));
  if (!e.is_object() || !e.contains("events")) {
    std::fprintf(stderr, "dpctl events failed: %s\n", e.dump().c_str());
    return json::array();
  }
  return e["events"];
}

// ms from t0 to the first event matching pred, or -1.
template <class P>
double first_after(const json& evs, int64_t t0, P pred) {
  for (auto& e : evs)
    if (pred(e) && e.value("mono_ns", int64_t{0}) >= t0)
      return static_cast<double>(e["mono_ns"].get<int64_t>() - t0) / 1e6;
  return -1;
}

// Drops everything arriving on rail0 at both ends; returns when the second
// end was cut (the fault's time), or clears it.
int64_t blackhole_rail0(bool on) {
  if (!on) {
    attach_drop("dpl-a", "rail0", 0, true);
    attach_drop("dpl-b", "rail0", 0, true);
    return 0;
  }
  attach_drop("dpl-b", "rail0", 100000);
  int64_t t0 = mono_ns();
  attach_drop("dpl-a", "rail0", 100000);
  return t0;
}

bool is_rail0_down(const json& e) {
  return e["kind"] == "health" && e["path"] == "rail0" &&
         e["reason"].get<std::string>().find("-> down") != std::string::npos;
}

bool ls_moved(const json& e) {
  return e["kind"] == "health" && (e["class"] == "expert-dispatch" || e["class"] == "control") &&
         e["after"].value("rail0", 0.0) == 0;
}

struct Stats {
  std::vector<double> v;
  void add(double x) {
    if (x >= 0) v.push_back(x);
  }
  double pct(double p) const {
    if (v.empty()) return -1;
    auto s = v;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1,
                      static_cast<size_t>(p * static_cast<double>(s.size() - 1) + 0.5))];
  }
};

void row(const char* what, const Stats& s, int trials, const char* goal) {
  std::printf("%-34s %4zu/%-3d %9.2f %9.2f %9.2f  %s\n", what, s.v.size(), trials, s.pct(0.5),
              s.pct(0.99), s.v.empty() ? -1.0 : *std::max_element(s.v.begin(), s.v.end()), goal);
}

struct Fault {
  const char* name;
  std::function<int64_t()> inject;  // returns the fault's time
  std::function<void()> clear;
};

void carrier_back() {
  must(nsenter("dpl-b") + "ip link set rail0 up");
  sh(nsenter("dpl-b") + "ip route replace 10.99.0.1/32 via 10.98.0.1 dev rail0 src 10.99.0.2");
  sh(nsenter("dpl-b") + "ip -6 route replace fd99::1/128 via fd98:0::1 dev rail0 src fd99::2");
}

// The blackhole, and node a's daemon killed in the middle of the failover
// (100 ms after it suspected rail0) and started again 300 ms later.
int64_t blackhole_and_restart() {
  int64_t t0 = blackhole_rail0(true);
  auto end = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < end && rail_state("a", "rail0") == "up")
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(100ms);
  pid_t pid = daemon_pid("dpl-a");
  if (pid > 0 && ::kill(pid, SIGKILL) == 0) wait_gone(pid);
  std::this_thread::sleep_for(300ms);
  must(dp_lab() + " start a");
  return t0;
}

std::vector<Fault> faults(bool separate) {
  // a's rail0 loses its carrier: b's end of the veth in the shared
  // topology, rail0's router's port toward a in the separate one
  Fault carrier{"carrier",
                [] {
                  int64_t t0 = mono_ns();
                  must(nsenter("dpl-b") + "ip link set rail0 down");
                  return t0;
                },
                carrier_back};
  if (separate)
    carrier = {"carrier",
               [] {
                 int64_t t0 = mono_ns();
                 must(nsenter("dpl-r0") + "ip link set to-a down");
                 return t0;
               },
               [] { must(nsenter("dpl-r0") + "ip link set to-a up"); }};
  return {
      {"blackhole", [] { return blackhole_rail0(true); }, [] { blackhole_rail0(false); }},
      {"one way",
       [] {
         attach_drop("dpl-b", "rail0", 100000);
         return mono_ns();
       },
       [] { attach_drop("dpl-b", "rail0", 0, true); }},
      {"loss 30%",
       [] {
         attach_drop("dpl-b", "rail0", 30000);
         int64_t t0 = mono_ns();
         attach_drop("dpl-a", "rail0", 30000);
         return t0;
       },
       [] { blackhole_rail0(false); }},
      carrier,
      {"restart", [] { return blackhole_and_restart(); }, [] { blackhole_rail0(false); }},
      {"none", [] { return mono_ns(); }, [] {}},
  };
}

struct FaultStats {
  Stats decision, ls_gap, elastic_gap, rpc_stall, busy_gap, carried_again;
  int resets = 0, lost = 0, trials = 0, reconnects = 0;
};

bool is_reset(const TransferResult& r) {
  return r.error.find("reset") != std::string::npos ||
         r.error.find("Broken pipe") != std::string::npos;
}

// The separate topology: a connection lives on its rail's addresses, so a
// failed rail's connections are ended (by dualpathd) and the application
// reconnects, placed on the other rail; what counts is how soon its bytes
// flow again. Streams that reconnect at once, to b's rail0 address.
void separate_trial(const Fault& f, FaultStats& st, bool busy, bool diagnose) {
  const char* peer = "10.10.2.2";
  ReconnectingStream ls("dpl-a", "dpl-b", peer, 50201, 20e6);
  ReconnectingStream elastic("dpl-a", "dpl-b", peer, 51201, 20e6);
  std::optional<ReconnectingStream> full;
  if (busy) full.emplace("dpl-a", "dpl-b", peer, 50202, 0);
  std::this_thread::sleep_for(1000ms);
  uint64_t since = last_event();
  int64_t t0 = f.inject();
  std::this_thread::sleep_for(1700ms);
  std::vector<uint64_t> before{ls.received(), elastic.received(), full ? full->received() : 0};
  std::this_thread::sleep_for(300ms);
  std::vector<uint64_t> after{ls.received(), elastic.received(), full ? full->received() : 1};
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  st.ls_gap.add(ms(ls.longest_gap_since(t0)));
  st.elastic_gap.add(ms(elastic.longest_gap_since(t0)));
  if (full) st.busy_gap.add(ms(full->longest_gap_since(t0)));
  if (int64_t first = ls.first_new_byte_since(t0)) st.carried_again.add(ms(first - t0));
  st.reconnects += ls.connections() - 1 + elastic.connections() - 1;
  if (full) st.reconnects += full->connections() - 1;
  for (size_t i = 0; i < before.size(); ++i) st.lost += after[i] == before[i];  // not carried
  json evs = events_since(since);
  st.decision.add(first_after(evs, t0, ls_moved));
  if (diagnose)  // what the daemon did, to read beside a stream that stalled
    for (auto& e : evs) std::fprintf(stderr, "    %s\n", e.value("reason", "").c_str());
  f.clear();
  std::fprintf(stderr, "  %s: gaps %.0f / %.0f ms, %d + %d connections\n", f.name,
               ms(ls.longest_gap_since(t0)), ms(elastic.longest_gap_since(t0)), ls.connections(),
               elastic.connections());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dualpath failover benchmark"};
  int trials = 20;
  std::string only;
  app.add_option("--trials", trials, "trials of each fault")->capture_default_str();
  bool diagnose = false;
  app.add_flag("--diagnose", diagnose,
               "read both nodes' rules and routes mid-fault; print them when a stream stalled "
               "(separate topology: print the daemon's events of each trial)");
  app.add_option("--faults", only,
                 "comma-separated faults to run (blackhole, one way, loss 30%, carrier, restart, "
                 "none)");
  bool busy = false;
  app.add_flag("--busy", busy, "a line-rate latency-sensitive stream on rail0 beside the others");
  std::string reserve;
  app.add_option("--reserve", reserve,
                 "give expert-combine (the elastic stream's class) this reserve, a rate or a "
                 "share of a rail (dualpath-policy(5)), e.g. 10%");
  std::string rto_min;
  app.add_option("--rto-min", rto_min,
                 "give expert-combine this rto_min (dualpath-policy(5)), e.g. 50ms; it has the "
                 "kernel's 200 ms otherwise");
  std::string topology = "shared";
  app.add_option("--topology", topology, "the lab's topology")
      ->check(CLI::IsMember({"shared", "separate"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const bool separate = topology == "separate";

  Env env;
  env.topology = topology;
  env.edit = [reserve, rto_min](const std::string& text) {
    std::string t = std::regex_replace(text, std::regex("holddown = \"5m\""),
                                       "holddown = \"1s\"\nramp_interval = \"100ms\"");
    std::string keys;  // what the options give expert-combine
    if (!reserve.empty()) keys += "\nreserve = \"" + reserve + "\"";
    if (!rto_min.empty()) keys += "\nrto_min = \"" + rto_min + "\"";
    return std::regex_replace(t, std::regex("name = \"expert-combine\""),
                              "name = \"expert-combine\"" + keys);
  };
  env.prepare = [] {
    for (const char* dev : {"rail0", "rail1"})
      must(nsenter("dpl-b") + "tc qdisc add dev " + dev + " clsact");
    return std::string();
  };
  env.SetUp();
  if (!g_skip.empty()) {
    std::fprintf(stderr, "cannot run: %s\n", g_skip.c_str());
    env.TearDown();
    return 1;
  }
  std::vector<Fault> list = faults(separate);
  std::vector<FaultStats> stats(list.size());
  Stats carrier_internal, idle_down;
  int failed_trials = 0;

  for (int t = 0; t < trials; ++t) {
    for (size_t f = 0; f < list.size(); ++f) {
      if (!only.empty() && only.find(list[f].name) == std::string::npos) continue;
      auto& st = stats[f];
      if (!wait_rails_up(30s)) ++failed_trials;
      ++st.trials;
      if (separate) {
        separate_trial(list[f], st, busy, diagnose);
        continue;
      }
      constexpr double kRate = 20e6;
      const uint64_t bytes = static_cast<uint64_t>(kRate / 8 * 4);  // 4 s
      Transfer ls({"dpl-a", "dpl-b", "10.99.0.2", 50201, 0, 0, bytes, kRate});
      Transfer elastic({"dpl-a", "dpl-b", "10.99.0.2", 51201, 0, 0, bytes, kRate});
      // 4 s at 1 Gbit/s at most: it ends with the others
      std::optional<Transfer> full;
      if (busy)
        full.emplace(TransferSpec{"dpl-a", "dpl-b", "10.99.0.2", 50202, 0, 0, 500u << 20, 0});
      std::vector<double> rtts;
      std::thread rpc(
          [&] { rtts = ping_pong("dpl-a", "dpl-b", "10.99.0.2", 53060, 1200, 256, 2000); });
      std::this_thread::sleep_for(1000ms);
      uint64_t since = last_event();
      int64_t t0 = list[f].inject();
      std::this_thread::sleep_for(1000ms);
      // the nodes' routing in the middle of the fault, shown if a stream stalled
      std::string mid;
      if (diagnose)
        for (const char* ns : {"dpl-a", "dpl-b"})
          mid += std::string(ns) + ":\n" + sh(nsenter(ns) + "ip rule show").out +
                 sh(nsenter(ns) +
                    "ip route show table all | grep -v '^local\\|^broadcast\\|fe80\\|^multicast'")
                     .out +
                 sh(nsenter(ns) + "ip -s link show dev rail0").out +
                 sh(nsenter(ns) + "nstat -azs TcpExtTCPSpuriousRtxHostQueues").out +
                 sh(nsenter(ns) + "tc -s qdisc show dev rail0").out +
                 sh(nsenter(ns) +
                    "ss -tin '( sport = 50201 or dport = 50201 or sport = 51201 or "
                    "dport = 51201 or sport = 53060 or dport = 53060 )'")
                     .out;
      std::this_thread::sleep_for(1000ms);
      json evs = events_since(since);
      st.decision.add(first_after(evs, t0, ls_moved));
      if (std::string(list[f].name) == "carrier") {
        double down = first_after(evs, t0, is_rail0_down), moved = first_after(evs, t0, ls_moved);
        if (down >= 0 && moved >= 0) carrier_internal.add(moved - down);
      }
      list[f].clear();
      auto a = ls.wait(), b = elastic.wait();
      rpc.join();
      for (auto* r : {&a, &b}) {
        st.resets += is_reset(*r);
        st.lost += !r->ok();
      }
      if (full) {
        auto c = full->wait();
        st.resets += is_reset(c);
        st.lost += !c.ok();
        if (c.ok()) st.busy_gap.add(static_cast<double>(c.max_gap_us) / 1000.0);
      }
      if (rtts.size() != 1200) ++st.lost;
      if (a.ok()) st.ls_gap.add(static_cast<double>(a.max_gap_us) / 1000.0);
      if (b.ok()) st.elastic_gap.add(static_cast<double>(b.max_gap_us) / 1000.0);
      if (!rtts.empty()) st.rpc_stall.add(*std::max_element(rtts.begin(), rtts.end()) / 1000.0);
      if (!a.ok() || !b.ok())
        std::fprintf(stderr, "  %s: %s / %s\n", list[f].name, a.error.c_str(), b.error.c_str());
      std::fprintf(stderr, "  %s: gaps %.0f / %.0f ms, longest RPC %.0f ms\n", list[f].name,
                   static_cast<double>(a.max_gap_us) / 1000,
                   static_cast<double>(b.max_gap_us) / 1000,
                   rtts.empty() ? -1.0 : *std::max_element(rtts.begin(), rtts.end()) / 1000.0);
      if (diagnose && (std::max(a.max_gap_us, b.max_gap_us) > 1'000'000 ||
                       (!rtts.empty() && *std::max_element(rtts.begin(), rtts.end()) > 1e6)))
        std::fprintf(stderr, "  stalled; mid-fault routing:\n%s\n", mid.c_str());
    }
    // ---- idle blackhole: BFD alone
    if (!separate && (only.empty() || only.find("idle") != std::string::npos)) {
      if (!wait_rails_up(30s)) ++failed_trials;
      uint64_t since = last_event();
      int64_t t0 = blackhole_rail0(true);
      std::this_thread::sleep_for(2000ms);
      idle_down.add(first_after(events_since(since), t0, is_rail0_down));
      blackhole_rail0(false);
    }
    std::fprintf(stderr, "trial %d/%d done\n", t + 1, trials);
  }
  wait_rails_up(30s);
  env.TearDown();

  if (separate)
    std::printf(
        "\nfailover, separate topology: %d trials of each fault, no BFD (the rails are routed); "
        "streams to b's rail0 address that reconnect when their connection ends, paced at 20 "
        "Mbit/s in 16 KiB writes%s\n",
        trials, busy ? "; rail0 busy: a line-rate expert-dispatch stream beside them" : "");
  else
    std::printf(
        "\nfailover: %d trials of each fault, BFD 500 ms x 3 (detection 1500 ms); "
        "streams paced at 20 Mbit/s in 64 KiB writes%s\n",
        trials, busy ? "; rail0 busy: a line-rate expert-dispatch stream beside them" : "");
  if (!reserve.empty()) std::printf("expert-combine has reserve = \"%s\"\n", reserve.c_str());
  if (!rto_min.empty()) std::printf("expert-combine has rto_min = \"%s\"\n", rto_min.c_str());
  std::printf("%-10s %-34s %7s %9s %9s %9s  %s\n", "fault", "measure (ms)", "trials", "p50", "p99",
              "max", "goal");
  for (size_t f = 0; f < list.size(); ++f) {
    auto& st = stats[f];
    if (!st.trials) continue;
    auto line = [&](const char* what, const Stats& s, const char* goal) {
      std::printf("%-10s ", list[f].name);
      row(what, s, st.trials, goal);
    };
    bool none = std::string(list[f].name) == "none";
    line("fault -> LS decisions off rail0", st.decision, none ? "" : "<= 300 ms p99");
    line("longest gap, expert-dispatch (LS)", st.ls_gap, none ? "" : "<= 300 ms p99");
    line("longest gap, expert-combine (el.)", st.elastic_gap, none ? "" : "<= 500 ms p99");
    if (!separate)
      line("longest RPC round trip, control", st.rpc_stall, none ? "" : "<= 300 ms p99");
    if (busy) line("longest gap, line-rate LS stream", st.busy_gap, none ? "" : "<= 300 ms p99");
    if (separate) {
      line("fault -> LS new connection's data", st.carried_again, none ? "" : "<= 300 ms p99");
      std::printf("%-10s %-34s %7d  (reconnections: %d)\n", list[f].name,
                  "streams not carried at the end", st.lost, st.reconnects);
    } else {
      std::printf("%-10s %-34s %7d  (connections reset: %d; goal 0)\n", list[f].name,
                  "connections lost", st.lost, st.resets);
    }
  }
  if (!carrier_internal.v.empty())
    row("carrier: netlink event -> decision map", carrier_internal, trials, "<= 10 ms");
  if (!idle_down.v.empty())
    row("blackhole, idle: fault -> rail down (BFD)", idle_down, trials, "<= 1550 ms");
  std::printf("trials that began with a rail not up: %d\n", failed_trials);
  return 0;
}
