// How fast a failed rail stops carrying traffic: trials of each fault in the
// lab, with the default BFD timers (500 ms x 3). For each trial:
//   carrier   - `ip link set rail0 down` at the peer: netlink event to decision
//               map (inside the daemon) and command to decision map;
//   blackhole - a drop-all filter on rail0 both ways while an expert-dispatch
//               stream and a control request/response stream run on it: fault
//               to the latency-sensitive classes' decisions leaving rail0, the
//               longest request/response stall, connections lost;
//   idle      - the same blackhole with no traffic: fault to BFD declaring the
//               rail down.
// The hold-down is 1 s and the ramp 100 ms steps so that trials follow
// quickly; those do not change the detection being measured.
//
//   build/tests/bench/dp-bench-failover [--trials N]
//
// Needs root and the lab down; brings the lab up (tools/dp-lab) and down.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
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

std::string health(const char* node, const char* rail) {
  json p = dpctl(node, std::string("path show ") + rail);
  return p.is_object() && p["health"].is_object() ? p["health"]["state"].get<std::string>() : "?";
}

bool wait_up(std::chrono::seconds t) {
  auto end = std::chrono::steady_clock::now() + t;
  while (std::chrono::steady_clock::now() < end) {
    bool all = true;
    for (const char* n : {"a", "b"})
      for (const char* r : {"rail0", "rail1"}) all = all && health(n, r) == "up";
    if (all) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
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
  std::printf("%-44s %6zu/%-3d %9.2f %9.2f %9.2f  %s\n", what, s.v.size(), trials, s.pct(0.5),
              s.pct(0.99), s.v.empty() ? -1.0 : *std::max_element(s.v.begin(), s.v.end()), goal);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dualpath failover benchmark"};
  int trials = 20;
  app.add_option("--trials", trials, "trials of each fault")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  Env env;
  env.edit = [](const std::string& text) {
    return std::regex_replace(text, std::regex("holddown = \"5m\""),
                              "holddown = \"1s\"\nramp_interval = \"100ms\"");
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
  Stats carrier_internal, carrier_e2e, bh_decision, bh_stall, idle_down;
  int lost = 0, failed_trials = 0;

  for (int t = 0; t < trials; ++t) {
    // ---- carrier loss
    if (!wait_up(30s)) ++failed_trials;
    uint64_t since = last_event();
    int64_t t0 = mono_ns();
    must(nsenter("dpl-b") + "ip link set rail0 down");
    std::this_thread::sleep_for(300ms);
    json evs = events_since(since);
    double down = first_after(evs, t0, is_rail0_down);
    double moved = first_after(evs, t0, ls_moved);
    carrier_e2e.add(moved);
    if (down >= 0 && moved >= 0) carrier_internal.add(moved - down);
    must(nsenter("dpl-b") + "ip link set rail0 up");
    sh(nsenter("dpl-b") + "ip route replace 10.99.0.1/32 via 10.98.0.1 dev rail0 src 10.99.0.2");
    sh(nsenter("dpl-b") + "ip -6 route replace fd99::1/128 via fd98:0::1 dev rail0 src fd99::2");

    // ---- blackhole with active flows
    if (!wait_up(30s)) ++failed_trials;
    {
      Transfer stream({"dpl-a", "dpl-b", "10.99.0.2", 50201, 0, 0, 20'000'000 / 8 * 4, 20e6});
      std::vector<double> rtts;
      std::thread rpc(
          [&] { rtts = ping_pong("dpl-a", "dpl-b", "10.99.0.2", 53060, 1000, 256, 2000); });
      std::this_thread::sleep_for(1000ms);
      since = last_event();
      t0 = blackhole_rail0(true);
      std::this_thread::sleep_for(2000ms);
      bh_decision.add(first_after(events_since(since), t0, ls_moved));
      auto r = stream.wait();
      rpc.join();
      if (!r.ok() || rtts.size() != 1000) ++lost;
      if (!rtts.empty()) bh_stall.add(*std::max_element(rtts.begin(), rtts.end()) / 1000.0);
      blackhole_rail0(false);
    }

    // ---- idle blackhole: BFD alone
    if (!wait_up(30s)) ++failed_trials;
    since = last_event();
    t0 = blackhole_rail0(true);
    std::this_thread::sleep_for(2000ms);
    idle_down.add(first_after(events_since(since), t0, is_rail0_down));
    blackhole_rail0(false);
    std::fprintf(stderr, "trial %d/%d done\n", t + 1, trials);
  }
  wait_up(30s);
  env.TearDown();

  std::printf("\nfailover: %d trials of each fault, BFD 500 ms x 3 (detection 1500 ms)\n", trials);
  std::printf("%-44s %10s %9s %9s %9s  %s\n", "measure (ms)", "trials", "p50", "p99", "max",
              "goal");
  row("carrier: netlink event -> decision map", carrier_internal, trials, "<= 10 ms");
  row("carrier: ip link down -> decision map", carrier_e2e, trials, "");
  row("blackhole, active: fault -> LS decision", bh_decision, trials, "<= 300 ms p99");
  row("blackhole, active: longest RPC stall", bh_stall, trials, "");
  row("blackhole, idle: fault -> rail down (BFD)", idle_down, trials, "<= 1550 ms");
  std::printf("connections lost: %d of %d trials; trials that began with a rail not up: %d\n", lost,
              trials, failed_trials);
  return 0;
}
