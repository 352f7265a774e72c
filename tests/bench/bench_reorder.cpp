// SPDX-License-Identifier: Apache-2.0
// Reordering during planned re-placements. The adaptive scheduler spills
// param-sync (230 Mbit/s on the 250 Mbit rail1, above the 0.60 threshold)
// onto rail0, so the class is split and its flow is re-placed at flowlet
// boundaries. The kernel's reordering counters (nstat, both ends) are read
// for the policy's 500 us gap adapted to the rails' RTT difference (the
// default), for a fixed 500 us gap, and for a fixed 1 us gap, which re-places
// almost every packet (per-packet spraying), alternating in one run.
//
//   build/tests/bench/dp-bench-reorder [--rounds R] [--seconds S]
//
// Needs root and the lab down; brings the lab up (tools/dp-lab) and down.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <thread>

#include "../lab/lab_fixture.h"

using namespace lab;
using namespace std::chrono_literals;

namespace {

const char* kSender[] = {"TcpExtTCPSACKReorder", "TcpExtTCPTSReorder", "TcpExtTCPRenoReorder",
                         "TcpExtTCPDSACKRecv", "TcpRetransSegs"};
const char* kReceiver[] = {"TcpExtTCPOFOQueue", "TcpExtTCPDSACKOldSent"};

std::map<std::string, double> nstat(const std::string& ns) {
  std::map<std::string, double> out;
  json j = json::parse(sh(nsenter(ns) + "nstat -azs --json").out, nullptr, false);
  if (j.is_object() && j["kernel"].is_object())
    for (auto& [k, v] : j["kernel"].items()) out[k] = v.get<double>();
  return out;
}

json param_sync() {
  for (auto& c : dpctl("a", "class list"))
    if (c["name"] == "param-sync") return c;
  return json::object();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dualpath reordering benchmark"};
  int rounds = 3, seconds = 5;
  bool background = false;
  app.add_option("--rounds", rounds, "rounds of each variant")->capture_default_str();
  app.add_option("--seconds", seconds, "transfer per round")->capture_default_str();
  app.add_flag("--background", background,
               "unclassified iperf3 traffic fills rail0's queue, so the rails' delays differ");
  CLI11_PARSE(app, argc, argv);

  Env env;
  env.edit = [](const std::string& t) {
    return std::regex_replace(t, std::regex("mode = \"static\""), "mode = \"adaptive\"");
  };
  env.SetUp();
  if (!g_skip.empty()) {
    std::fprintf(stderr, "cannot run: %s\n", g_skip.c_str());
    env.TearDown();
    return 1;
  }
  const std::string pa = read_file(g_policies + "/lab-a.toml");
  const std::string pb = read_file(g_policies + "/lab-b.toml");
  struct Variant {
    const char* name;
    const char* gap;
    bool adaptive;
    std::map<std::string, double> d;
    double flowlets = 0, replaced = 0, bytes = 0, rail0_share = 0;
  };
  Variant vs[3] = {{"adaptive 500 us", "500us", true, {}},
                   {"fixed 500 us", "500us", false, {}},
                   {"fixed 1 us", "1us", false, {}}};
  for (int r = 0; r < rounds; ++r) {
    for (auto& v : vs) {
      static const std::regex gap("flowlet_gap = \"[^\"]*\"");
      std::string g = std::string("flowlet_gap = \"") + v.gap +
                      "\"\nadaptive_flowlet_gap = " + (v.adaptive ? "true" : "false");
      write_file(g_policies + "/lab-a.toml", std::regex_replace(pa, gap, g));
      write_file(g_policies + "/lab-b.toml", std::regex_replace(pb, gap, g));
      for (const char* n : {"a", "b"}) dpctl(n, "policy reload");
      std::this_thread::sleep_for(1s);  // the class is back on rail1 after the reload
      auto sa = nstat("dpl-a"), sb = nstat("dpl-b");
      json c0 = param_sync();
      uint64_t r0 = tx_bytes("dpl-a", "rail0"), r1 = tx_bytes("dpl-a", "rail1");
      pid_t bg_srv = -1, bg_cli = -1;
      if (background) {  // port 45000 is in no class: it stays on rail0's default leaf
        bg_srv = spawn_in_ns("dpl-b", {"/usr/bin/iperf3", "-s", "-p", "45000"}, "/dev/null");
        std::this_thread::sleep_for(300ms);
        bg_cli = spawn_in_ns("dpl-a",
                             {"/usr/bin/iperf3", "-c", "10.99.0.2", "-p", "45000", "-t",
                              std::to_string(seconds + 5)},
                             "/dev/null");
        std::this_thread::sleep_for(500ms);
      }
      uint64_t bytes = static_cast<uint64_t>(seconds) * 230'000'000ull / 8;
      auto res = tcp_transfer(
          {"dpl-a", "dpl-b", "10.99.0.2", static_cast<uint16_t>(52300 + r), 0, 0, bytes, 230e6});
      if (!res.ok()) std::fprintf(stderr, "round %d %s: %s\n", r, v.name, res.error.c_str());
      stop_child(bg_cli, 2000);
      stop_child(bg_srv, 2000);
      json c1 = param_sync();
      auto ea = nstat("dpl-a"), eb = nstat("dpl-b");
      for (const char* k : kSender) v.d[k] += ea[k] - sa[k];
      for (const char* k : kReceiver) v.d[k] += eb[k] - sb[k];
      v.flowlets += c1.value("flowlets", 0.0) - c0.value("flowlets", 0.0);
      v.replaced += c1.value("flows_replaced", 0.0) - c0.value("flows_replaced", 0.0);
      double d0 = static_cast<double>(tx_bytes("dpl-a", "rail0") - r0);
      double d1 = static_cast<double>(tx_bytes("dpl-a", "rail1") - r1);
      v.rail0_share += d0 / std::max(1.0, d0 + d1) / rounds;
      v.bytes += static_cast<double>(res.received);
      std::fprintf(stderr, "round %d/%d %s done\n", r + 1, rounds, v.name);
    }
  }
  write_file(g_policies + "/lab-a.toml", pa);
  write_file(g_policies + "/lab-b.toml", pb);
  env.TearDown();

  std::printf(
      "\nreordering: param-sync at 230 Mbit/s spilled over both rails by the adaptive\n"
      "scheduler; %d rounds x %d s per variant, alternating; counters summed%s\n\n",
      rounds, seconds,
      background ? ";\nrail0's queue kept full by unclassified iperf3 traffic" : "");
  auto row = [&](const char* what, auto get, const char* fmt) {
    std::printf("%-30s", what);
    for (auto& v : vs) std::printf(fmt, get(v));
    std::printf("\n");
  };
  std::printf("%-30s", "counter");
  for (auto& v : vs) std::printf(" %16s", v.name);
  std::printf("\n");
  for (const char* k : kSender)
    row(
        k, [&](Variant& v) { return v.d[k]; }, " %16.0f");
  for (const char* k : kReceiver)
    row(
        k, [&](Variant& v) { return v.d[k]; }, " %16.0f");
  row(
      "flowlets started (dualpath)", [](Variant& v) { return v.flowlets; }, " %16.0f");
  row(
      "flows re-placed (dualpath)", [](Variant& v) { return v.replaced; }, " %16.0f");
  row(
      "share of bytes on rail0 (%)", [](Variant& v) { return 100 * v.rail0_share; }, " %16.0f");
  row(
      "MB delivered", [](Variant& v) { return v.bytes / 1e6; }, " %16.0f");
  std::printf("(sender counters from dpl-a, receiver counters from dpl-b)\n");
  return 0;
}
