// SPDX-License-Identifier: Apache-2.0
// Isolation on the wire: control RPC latency on a rail that an elastic class
// (iperf3 on an expert-combine port) keeps full, with the lab policies' per-class skb->priority and
// DSCP (the rail's HTB serves the latency-sensitive leaf first) and without them (the same policy
// with every dscp and skb_priority line removed, so control waits in the bulk leaf's queue). The
// two alternate in one run, ABAB...
//
//   build/tests/bench/dp-bench-isolation [--rounds R] [--seconds S]
//
// Needs root and the lab down; brings the lab up (tools/dp-lab) and down.
#include <sys/wait.h>

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

double pct(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1,
                    static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

bool use_policies(bool qos, const std::string& with_a, const std::string& with_b) {
  static const std::regex strip("\n(dscp|skb_priority) = [^\n]*");
  write_file(g_policies + "/lab-a.toml", qos ? with_a : std::regex_replace(with_a, strip, ""));
  write_file(g_policies + "/lab-b.toml", qos ? with_b : std::regex_replace(with_b, strip, ""));
  for (const char* n : {"a", "b"}) {
    json r = dpctl(n, "policy reload");
    if (!r.is_object() || !r.contains("hash")) {
      std::fprintf(stderr, "reload on %s failed: %s\n", n, r.dump().c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dualpath isolation benchmark"};
  int rounds = 3, seconds = 4;
  app.add_option("--rounds", rounds, "rounds of each variant")->capture_default_str();
  app.add_option("--seconds", seconds, "saturation per round")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  Env env;
  env.SetUp();
  if (!g_skip.empty()) {
    std::fprintf(stderr, "cannot run: %s\n", g_skip.c_str());
    env.TearDown();
    return 1;
  }
  const std::string with_a = read_file(g_policies + "/lab-a.toml");
  const std::string with_b = read_file(g_policies + "/lab-b.toml");
  struct Variant {
    const char* name;
    bool qos;
    std::vector<double> idle, loaded;
    double goodput_bps = 0;
  };
  Variant vs[2] = {{"with class priority + DSCP", true, {}, {}},
                   {"without (one queue)", false, {}, {}}};
  const int rpcs = seconds * 400;
  uint16_t port = 53010;  // the control class is 53000-53099
  for (int r = 0; r < rounds; ++r) {
    for (auto& v : vs) {
      if (!use_policies(v.qos, with_a, with_b)) return env.TearDown(), 1;
      std::this_thread::sleep_for(300ms);
      auto idle = ping_pong("dpl-a", "dpl-b", "10.99.0.2", port++, 400, 256, 1000);
      v.idle.insert(v.idle.end(), idle.begin(), idle.end());
      // expert-combine from iperf3 (little CPU, unlike a checksumming sender:
      // on a 2-core machine the RPCs must wait for the queue, not for a core)
      const std::string port_s = std::to_string(51300 + r);
      const std::string log = g_policies + "/iperf3-" + port_s + ".json";
      pid_t srv = spawn_in_ns("dpl-b", {"/usr/bin/iperf3", "-s", "-1", "-p", port_s}, "/dev/null");
      std::this_thread::sleep_for(300ms);
      pid_t cli = spawn_in_ns("dpl-a",
                              {"/usr/bin/iperf3", "-c", "10.99.0.2", "-p", port_s, "-t",
                               std::to_string(seconds + 1), "-J"},
                              log);
      std::this_thread::sleep_for(500ms);  // the queue has filled
      auto loaded = ping_pong("dpl-a", "dpl-b", "10.99.0.2", port++, rpcs, 256, 1000);
      v.loaded.insert(v.loaded.end(), loaded.begin(), loaded.end());
      for (int i = 0; i < (seconds + 10) * 10 && ::waitpid(cli, nullptr, WNOHANG) != cli; ++i)
        std::this_thread::sleep_for(100ms);  // iperf3 ends by itself and writes its JSON
      stop_child(cli, 1000);
      stop_child(srv, 2000);
      json ij = json::parse(read_file(log), nullptr, false);
      double bps = 0;
      if (ij.is_object() && ij.contains("end"))
        bps = ij["end"]["sum_received"].value("bits_per_second", 0.0);
      if (loaded.size() != static_cast<size_t>(rpcs) || bps == 0)
        std::fprintf(stderr, "round %d %s: RPCs or bulk failed (%s)\n", r, v.name, log.c_str());
      v.goodput_bps += bps / rounds;
      std::fprintf(stderr, "round %d/%d %s done\n", r + 1, rounds, v.name);
    }
  }
  use_policies(true, with_a, with_b);
  env.TearDown();

  std::printf(
      "\nisolation: control RPC (256 B request/response) round trip on rail0 (1 Gbit, HTB)\n"
      "while expert-combine saturates it; %d rounds x %d s per variant, alternating\n\n",
      rounds, seconds);
  std::printf("%-28s %10s %10s %10s %10s %10s %10s %12s\n", "variant", "idle p50", "idle p99",
              "load p50", "load p99", "load p99.9", "load max", "bulk Mbit/s");
  for (auto& v : vs)
    std::printf("%-28s %10.0f %10.0f %10.0f %10.0f %10.0f %10.0f %12.0f\n", v.name,
                pct(v.idle, 0.5), pct(v.idle, 0.99), pct(v.loaded, 0.5), pct(v.loaded, 0.99),
                pct(v.loaded, 0.999), pct(v.loaded, 1.0), v.goodput_bps / 1e6);
  std::printf("(round trips in microseconds; %zu and %zu samples under load)\n",
              vs[0].loaded.size(), vs[1].loaded.size());
  double ratio = pct(vs[1].loaded, 0.99) / std::max(1.0, pct(vs[0].loaded, 0.99));
  std::printf("p99 under load: %.1fx lower with isolation\n", ratio);
  return 0;
}
