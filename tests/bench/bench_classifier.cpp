// SPDX-License-Identifier: Apache-2.0
// Cost per packet of the egress classifier, from BPF_PROG_TEST_RUN with
// repeat, against two programs measured in the same run: an empty tc
// program (the floor) and a minimal reference classifier (bpf/dp_bench.bpf.c:
// parse, a port-array lookup, a flow-hash lookup updated in place, a decision
// lookup). Each row is given in ns above the empty program and as a ratio of
// that to the reference's, which holds across machines where the ns do not
// (a helper call costs more on a CPU with retpolines). Every case runs
// through the bench object's prelude, which gives TCP's packets their
// departure time and tail-calls the program under test; the prelude costs
// every row alike. Rounds interleave every case; the table reports medians.
//
//   build/tests/bench/dp-bench-classifier [--repeat N] [--rounds R]
//
// Needs root. Maps are programmed from policies/lab-a.toml, as the daemon does.
#include <arpa/inet.h>
#include <linux/pkt_cls.h>
#include <netinet/in.h>
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "../bpf/packet.h"
#include "dp_bench.skel.h"
#include "dualpath/core/encode.h"
#include "dualpath/kernel/attach.h"
#include "dualpath/kernel/cgroups.h"

namespace {

// Classes by cgroup for a case: off in the generation, on and this
// process's cgroup named by a class, or on and no class naming it.
enum class Cgroups { Off, Match, NoMatch };

// The classes' QoS: none (dp_class_qos empty, nothing stamped), their dscp
// and skb_priority as the lab policy has them, or those and its [qos] for
// their pure ACKs.
enum class Qos { Off, Class, ClassAndAcks };

// What a row runs: the product's egress program, or one of the bench's.
enum class Prog { Egress, Empty, Reference };

struct Case {
  const char* name;
  dptest::PacketSpec pkt;
  uint32_t mark;
  Prog prog;
  Cgroups cgroups = Cgroups::Off;
  bool tcp_time = false;  // carries a departure time (skb->tstamp), as TCP's packets do
  bool bursts = false;    // param-sync placed by bursts instead of cells (DP_CELL_F_BURSTS)
  // a UDP socket was bound to a rail's address (dp_udp_binds), and the
  // packet leaves from one: what a UDP server's reply pays (lib/listen.h)
  bool udp_servers = false;
  Qos qos = Qos::Off;
};

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

double run_ns(int fd, const std::vector<uint8_t>& pkt, uint32_t mark, bool tcp_time,
              uint32_t repeat, int* ret) {
  __sk_buff ctx{};
  ctx.mark = mark;
  if (tcp_time) ctx.tstamp = mono_ns();
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt.data(),
              .data_size_in = static_cast<uint32_t>(pkt.size()), .ctx_in = &ctx,
              .ctx_size_in = sizeof(ctx), .repeat = static_cast<int>(repeat));
  if (bpf_prog_test_run_opts(fd, &opts) != 0) {
    std::fprintf(stderr, "BPF_PROG_TEST_RUN failed: %s\n", std::strerror(errno));
    std::exit(1);
  }
  *ret = static_cast<int>(opts.retval);
  return static_cast<double>(opts.duration);  // average ns per run
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dp-bench-classifier: per-packet cost of the dualpath egress classifier"};
  uint32_t repeat = 2'000'000;
  int rounds = 7;
  std::string json_out;
  app.add_option("--repeat", repeat, "BPF_PROG_TEST_RUN repeat count per measurement")
      ->capture_default_str();
  app.add_option("--rounds", rounds, "interleaved rounds; the median is reported")
      ->capture_default_str();
  app.add_option("--json", json_out, "also write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "dp-bench-classifier needs root\n");
    return 1;
  }

  auto skel = dp::DpSkeleton::load("");
  if (!skel) {
    std::fprintf(stderr, "%s\n", skel.error().str().c_str());
    return 1;
  }
  auto& s = **skel;
  auto load = dp::load_policy_file(std::string(DP_POLICY_DIR) + "/lab-a.toml");
  if (!load.ok()) return 1;
  const dp::Policy& p = *load.policy;
  auto enc = dp::encode_policy(p, {0, 1, 2, 3, 4}, {0, 1});
  // the bench's programs; the reference classifier gets the same classes by
  // destination port, and each class its preferred rail
  dp_bench* bench = dp_bench__open_and_load();
  if (!bench) {
    std::fprintf(stderr, "loading the bench's BPF object failed: %s\n", std::strerror(errno));
    return 1;
  }
  for (uint32_t port = 0; port < DP_PORT_SPACE; ++port) {
    uint32_t cls = enc.ports[port].cls[DP_PORT_TCP_DST];
    if (cls == DP_CLASS_NONE) cls = enc.ports[port].cls[DP_PORT_UDP_DST];
    cls = cls == DP_CLASS_NONE ? DP_MAX_CLASSES : cls;
    (void)bpf_map_update_elem(bpf_map__fd(bench->maps.dp_ref_ports), &port, &cls, BPF_ANY);
  }
  for (uint32_t c = 0; c < p.classes.size(); ++c) {
    auto rail = static_cast<uint32_t>(p.path_index(p.classes[c].prefer));
    (void)bpf_map_update_elem(bpf_map__fd(bench->maps.dp_ref_decisions), &c, &rail, BPF_ANY);
  }
  for (uint32_t port = 0; port < DP_PORT_SPACE; ++port)
    (void)s.dp_ports().update(port, enc.ports[port]);
  for (auto& [mark, cls] : enc.marks) {
    dp_mark_key k{0, mark};
    dp_mark_val v{cls, {}};
    (void)s.dp_marks().update(k, v);
  }
  uint32_t zero = 0, lo = 1;
  dp_config cfg{0, DP_CLASS_NONE, 500'000, 0};  // the default 500 us flowlet gap
  (void)s.dp_config().update(zero, cfg);
  for (uint32_t r = 0; r < 2; ++r) {
    dp_rail rail = dp::encode_rail(p.paths[r], r == 0 ? 1 : 4242, true);
    (void)s.dp_rails().update(r, rail);
  }
  (void)s.set_rail_ifindex(lo, 0);
  for (uint32_t c = 0; c < p.classes.size(); ++c) {
    dp_decision d = dp::decision_all_on(p.path_index(p.classes[c].prefer), false, 1);
    // split over both rails: expert-combine by flowlets (timed), param-sync by cells
    if (p.classes[c].name == "expert-combine" || p.classes[c].name == "param-sync") {
      d.share[0] = DP_SHARE_SCALE / 2;
      d.share[1] = DP_SHARE_SCALE / 2;
    }
    (void)s.dp_decisions().update(c, d);
  }
  dp_cell_cfg cells{};
  cells.cell_shift = 14;        // the default 16 KiB
  cells.class_mask = 1u << 2;   // param-sync
  cells.ns_per_kib[0] = 8192;   // 1 Gbit
  cells.ns_per_kib[1] = 32768;  // 250 Mbit
  (void)s.dp_cells().update(zero, cells);
  // rail1's virtual queue an hour long: every cell stays on rail0, so that
  // the cells rows pass like the flowlet rows (no redirect in the figure)
  dp_vq vq{};
  vq.finish_ns[1] = mono_ns() + 3600'000'000'000ull;
  (void)s.dp_vq().update(zero, vq);

  // a pure ACK of expert-dispatch, with the timestamps option as Linux sends it
  dptest::PacketSpec pure_ack{4, IPPROTO_TCP, 40000, 50001};
  pure_ack.payload = 0;
  pure_ack.tcp_options = 12;
  // a class by port that stays, with its QoS programmed
  auto with_qos = [](const char* name, const dptest::PacketSpec& pkt, Qos qos) {
    Case c{name, pkt, 0, Prog::Egress};
    c.qos = qos;
    return c;
  };
  const Case cases[] = {
      {"empty program (floor)", {4, IPPROTO_TCP, 40000, 50001}, 0, Prog::Empty},
      {"reference classifier, v4 tcp", {4, IPPROTO_TCP, 40000, 50001}, 0, Prog::Reference},
      {"reference classifier, v4 udp", {4, IPPROTO_UDP, 40000, 50001}, 0, Prog::Reference},
      {"reference classifier, v6 tcp", {6, IPPROTO_TCP, 40000, 50001}, 0, Prog::Reference},
      {"v4 tcp, class by port, stays", {4, IPPROTO_TCP, 40000, 50001}, 0, Prog::Egress},
      {"v4 udp, class by port, stays", {4, IPPROTO_UDP, 40000, 50001}, 0, Prog::Egress},
      {"v6 tcp, class by port, stays", {6, IPPROTO_TCP, 40000, 50001}, 0, Prog::Egress},
      {"v4 tcp, class by port, redirect*", {4, IPPROTO_TCP, 40000, 52001}, 0, Prog::Egress},
      {"v4 tcp, class by mark, redirect*", {4, IPPROTO_TCP, 40000, 40001}, 0x54, Prog::Egress},
      {"v6 udp, class by port, redirect*", {6, IPPROTO_UDP, 40000, 54001}, 0, Prog::Egress},
      {"v4 tcp, split, flowlets, TCP time",
       {4, IPPROTO_TCP, 40002, 51001},
       0,
       Prog::Egress,
       Cgroups::Off,
       true},
      {"v4 tcp, split, flowlets, clock read", {4, IPPROTO_TCP, 40004, 51001}, 0, Prog::Egress},
      {"v4 tcp, split, cells, TCP time",
       {4, IPPROTO_TCP, 40003, 52002},
       0,
       Prog::Egress,
       Cgroups::Off,
       true},
      {"v4 tcp, split, cells, clock read", {4, IPPROTO_TCP, 40005, 52002}, 0, Prog::Egress},
      // inside a burst, planned where it is (the cost of every packet but a
      // burst's first; the first also reads the socket, which a test run's
      // packet does not have)
      {"v4 tcp, split, bursts, TCP time",
       {4, IPPROTO_TCP, 40006, 52002},
       0,
       Prog::Egress,
       Cgroups::Off,
       true,
       true},
      {"v4 udp, a rail-bound server's reply",
       {4, IPPROTO_UDP, 50001, 40000},
       0,
       Prog::Egress,
       Cgroups::Off,
       false,
       false,
       true},
      // the DSCP is rewritten in the first of the repeated runs of the one
      // skb; the others find it written (what a run measures: the check)
      with_qos("v4 tcp, class by port, QoS", {4, IPPROTO_TCP, 40000, 50001}, Qos::Class),
      with_qos("v4 tcp, class by port, QoS + [qos]", {4, IPPROTO_TCP, 40000, 50001},
               Qos::ClassAndAcks),
      with_qos("v4 tcp ACK, by port, QoS + [qos]", pure_ack, Qos::ClassAndAcks),
      {"v4 tcp, unclassified", {4, IPPROTO_TCP, 40000, 40001}, 0, Prog::Egress},
      {"v4 fragment (passed)", {4, IPPROTO_TCP, 40000, 50001, 0, false, true}, 0, Prog::Egress},
      {"v4 tcp, class by cgroup", {4, IPPROTO_TCP, 40000, 40001}, 0, Prog::Egress, Cgroups::Match},
      {"v4 tcp, no class, cgroups on",
       {4, IPPROTO_TCP, 40000, 40001},
       0,
       Prog::Egress,
       Cgroups::NoMatch},
      {"v4 tcp, class by port, cgroups on",
       {4, IPPROTO_TCP, 40000, 50001},
       0,
       Prog::Egress,
       Cgroups::Match},
  };
  // BPF_PROG_TEST_RUN's skb has a socket made by this process: its cgroup is ours
  uint64_t own_id = 0;
  if (auto root = dp::cgroup2_root(); root)
    if (auto own = dp::own_cgroup(); own)
      if (auto id = dp::cgroup_id(*root + *own); id) own_id = *id;
  if (!own_id) std::fprintf(stderr, "cannot find this process's cgroup v2 id\n");
  auto set_cgroups = [&](Cgroups mode) {
    dp_cgroup_key k{own_id, 0, 0};
    dp_cgroup_val v{4, {}};  // logs
    if (mode == Cgroups::Match)
      (void)s.dp_cgroups().update(k, v);
    else
      (void)s.dp_cgroups().remove(k);
    (void)s.dp_cgroup_cache().remove(k);
    uint32_t gens = mode == Cgroups::Off ? 0 : 1;
    (void)s.dp_cgroup_gens().update(zero, gens);
  };
  // param-sync by cells, or by bursts with a plan that keeps the flow on rail0
  dp_cell_cfg burst_cfg = cells;
  burst_cfg.flags |= DP_CELL_F_BURSTS;
  for (auto& c : cases)
    if (c.bursts) {
      dp_plan plan{0, 1, 0};
      auto key = dptest::flow_key_of(c.pkt);
      (void)s.dp_plans().update(key, plan);
    }
  auto set_qos = [&](Qos mode) {
    for (uint32_t c = 0; c < p.classes.size(); ++c) {
      dp_class_qos q = mode == Qos::Off     ? dp_class_qos{}
                       : mode == Qos::Class ? dp::encode_qos(p.classes[c], dp::QosSettings{})
                                            : dp::encode_qos(p.classes[c], p.qos);
      (void)s.dp_class_qos().update(c, q);
    }
  };
  auto set_placement = [&](bool bursts) {
    (void)s.dp_cells().update(zero, bursts ? burst_cfg : cells);
  };
  auto set_udp_servers = [&](bool on) {
    uint64_t binds = on ? 1 : 0;
    (void)s.dp_udp_binds().update(zero, binds);
    dp_local_addr here{}, other{};
    if (on) {
      here.addr4 = inet_addr("10.99.0.1");  // the packets' source
      other.addr4 = inet_addr("10.98.0.1");
    }
    (void)s.dp_local_addrs().update(0u, here);
    (void)s.dp_local_addrs().update(1u, other);
  };
  const size_t n = std::size(cases);
  std::vector<std::vector<uint8_t>> pkts;
  for (auto& c : cases) pkts.push_back(dptest::build_packet(c.pkt));
  std::vector<std::vector<double>> samples(n);
  std::vector<int> rets(n);
  int next = bpf_map__fd(bench->maps.dp_bench_next),
      prelude = bpf_program__fd(bench->progs.dp_bench_prelude);
  auto fd_of = [&](Prog prog) {
    return prog == Prog::Egress  ? s.egress_fd()
           : prog == Prog::Empty ? bpf_program__fd(bench->progs.dp_empty)
                                 : bpf_program__fd(bench->progs.dp_reference);
  };
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < n; ++i) {
      set_cgroups(cases[i].cgroups);
      set_placement(cases[i].bursts);
      set_udp_servers(cases[i].udp_servers);
      set_qos(cases[i].qos);
      uint32_t slot = 0;
      int fd = fd_of(cases[i].prog);
      (void)bpf_map_update_elem(next, &slot, &fd, BPF_ANY);
      samples[i].push_back(
          run_ns(prelude, pkts[i], cases[i].mark, cases[i].tcp_time, repeat, &rets[i]));
    }
  dp_bench__destroy(bench);

  double base = median(samples[0]);
  // the reference's cost above the floor, per family and protocol: a row is
  // compared with the reference row of its own packet kind
  auto ref_of = [&](const dptest::PacketSpec& pkt) {
    for (size_t i = 0; i < n; ++i)
      if (cases[i].prog == Prog::Reference && cases[i].pkt.family == pkt.family &&
          cases[i].pkt.proto == pkt.proto)
        return median(samples[i]) - base;
    return median(samples[1]) - base;  // v4 tcp's
  };
  std::printf(
      "dualpath egress classifier, BPF_PROG_TEST_RUN, repeat %u, %d interleaved rounds "
      "(median)\n\n",
      repeat, rounds);
  std::printf("%-36s %10s %12s %12s  %s\n", "case", "ns/packet", "minus empty", "x reference",
              "verdict");
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i) {
    double m = median(samples[i]);
    double extra = m - base;
    double ratio = extra / ref_of(cases[i].pkt);
    const char* verdict = std::strchr(cases[i].name, '*') ? "redirect + arrival"
                          : rets[i] == TC_ACT_REDIRECT    ? "redirect"
                                                       : (rets[i] == TC_ACT_UNSPEC ? "pass" : "ok");
    // the goal: a packet of a class that stays costs at most 1.25x the reference
    bool goal = std::strstr(cases[i].name, "stays") != nullptr;
    if (cases[i].prog == Prog::Empty)
      std::printf("%-36s %10.1f %12s %12s  %s\n", cases[i].name, m, "-", "-", verdict);
    else
      std::printf("%-36s %10.1f %12.1f %12s  %s%s\n", cases[i].name, m, extra,
                  fmt::format("{:.2f}x", ratio).c_str(), verdict,
                  goal && ratio > 1.25 ? "   (over the 1.25x goal)" : "");
    out.push_back({{"case", cases[i].name},
                   {"ns_per_packet", m},
                   {"minus_empty_ns", cases[i].prog == Prog::Empty ? 0 : extra},
                   {"x_reference", cases[i].prog == Prog::Empty ? 0 : ratio},
                   {"samples", samples[i]}});
  }
  std::printf(
      "\nGoal: a packet of a class that stays costs at most 1.25x the reference classifier "
      "(minus empty).\n");
  std::printf(
      "\n* BPF_PROG_TEST_RUN runs one skb %u times, and a redirect marks it: the next run takes "
      "the\n"
      "  arrival path (recognise the mark, count, pass). These rows are the mean of the two hook\n"
      "  visits a redirected packet really makes (classify+redirect on one rail, pass on the "
      "other).\n",
      repeat);
  if (!json_out.empty()) {
    FILE* f = std::fopen(json_out.c_str(), "w");
    if (f) {
      std::fputs(out.dump(2).c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
