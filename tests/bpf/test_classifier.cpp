// SPDX-License-Identifier: Apache-2.0
// The real datapath programs, loaded through the verifier, fed packets with
// BPF_PROG_TEST_RUN. The maps are programmed from the lab policy by the same
// encoder the daemon uses. Needs root (CAP_BPF); skipped otherwise.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/pkt_cls.h>
#include <netinet/in.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "dp_bench.skel.h"
#include "dp_tc.skel.h"
#include "dualpath/core/encode.h"
#include "dualpath/kernel/attach.h"
#include "dualpath/kernel/cgroups.h"
#include "packet.h"

using dptest::build_packet;
using dptest::PacketSpec;

namespace {

constexpr int DP_PASS = TC_ACT_UNSPEC;    // what the programs return for "not steered"
constexpr uint32_t kLoIfindex = 1;        // test runs use the loopback device
constexpr uint32_t kRail1Ifindex = 4242;  // never dereferenced by a test run
// class slots in lab-a.toml order
constexpr int kDispatch = 0, kCombine = 1, kParamSync = 2, kControl = 3, kLogs = 4;

struct RunResult {
  int ret = -1;
  uint32_t mark_out = 0;
};

class Classifier : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "skipped: BPF tests need root (CAP_BPF, CAP_NET_ADMIN)";
    auto skel = dp::DpSkeleton::load("");
    ASSERT_TRUE(skel) << skel.error().str();
    skel_ = std::move(*skel);
    auto load = dp::load_policy_file(std::string(DP_POLICY_DIR) + "/lab-a.toml");
    ASSERT_TRUE(load.ok());
    policy_ = *load.policy;
    auto enc = dp::encode_policy(policy_, {0, 1, 2, 3, 4}, {0, 1});
    write_ports(0, enc);
    for (auto& [mark, cls] : enc.marks) {
      dp_mark_key k{0, mark};
      dp_mark_val v{cls, {}};
      ASSERT_TRUE(skel_->dp_marks().update(k, v));
    }
    set_config(0, DP_CLASS_NONE);
    set_rail(0, kLoIfindex, true, true, true);
    set_rail(1, kRail1Ifindex, true, true, true);
    uint32_t ifidx = kLoIfindex;
    ASSERT_TRUE(skel_->set_rail_ifindex(ifidx, 0));
    for (uint32_t c = 0; c < policy_.classes.size(); ++c)
      set_decision(c, policy_.path_index(policy_.classes[c].prefer));
  }

  void write_ports(uint32_t gen, const dp::EncodedPolicy& enc) {
    for (uint32_t p = 0; p < DP_PORT_SPACE; ++p) {
      uint32_t key = gen * DP_PORT_SPACE + p;
      ASSERT_TRUE(skel_->dp_ports().update(key, enc.ports[p]));
    }
  }
  void set_config(uint32_t gen, uint32_t default_class, uint64_t flowlet_gap_ns = 0,
                  uint32_t cgroup_gens = 0) {
    uint32_t zero = 0;
    dp_config c{gen, default_class, flowlet_gap_ns, 0};
    ASSERT_TRUE(skel_->dp_config().update(zero, c));
    ASSERT_TRUE(skel_->dp_cgroup_gens().update(zero, cgroup_gens));
  }
  void set_rail(uint32_t slot, uint32_t ifindex, bool enabled, bool gw4, bool gw6) {
    dp::PathSpec ps = policy_.paths[slot];
    if (!gw4) ps.gateway.reset();
    if (!gw6) ps.gateway6.reset();
    dp_rail r = dp::encode_rail(ps, ifindex, enabled);
    ASSERT_TRUE(skel_->dp_rails().update(slot, r));
  }
  void set_shares(uint32_t cls, uint16_t rail0, uint16_t rail1) {
    dp_decision d{};
    d.share[0] = rail0;
    d.share[1] = rail1;
    d.version = ++version_;
    ASSERT_TRUE(skel_->dp_decisions().update(cls, d));
  }
  void set_decision(uint32_t cls, int rail) {
    dp_decision d = dp::decision_all_on(rail, false, ++version_);
    ASSERT_TRUE(skel_->dp_decisions().update(cls, d));
  }

  RunResult run(int prog_fd, const PacketSpec& s, uint32_t mark = 0) {
    auto pkt = build_packet(s);
    __sk_buff ctx_in{}, ctx_out{};
    ctx_in.mark = mark;
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt.data(),
                .data_size_in = static_cast<uint32_t>(pkt.size()), .ctx_in = &ctx_in,
                .ctx_out = &ctx_out, .ctx_size_in = sizeof(ctx_in), .ctx_size_out = sizeof(ctx_out),
                .repeat = 1);
    int err = bpf_prog_test_run_opts(prog_fd, &opts);
    EXPECT_EQ(err, 0) << "BPF_PROG_TEST_RUN failed: " << std::strerror(errno);
    return {static_cast<int>(opts.retval), ctx_out.mark};
  }
  RunResult egress(const PacketSpec& s, uint32_t mark = 0) {
    return run(skel_->egress_fd(), s, mark);
  }
  // An egress run of `s`, which comes with skb->priority `prio_in`: the
  // skb->priority it leaves with, and its bytes as they leave.
  struct Stamped {
    uint32_t priority = 0;
    std::vector<uint8_t> out;
  };
  Stamped egress_stamped(const PacketSpec& s, uint32_t prio_in = 0) {
    auto pkt = build_packet(s);
    Stamped r;
    r.out.resize(pkt.size() + 64);
    __sk_buff ctx_in{}, ctx_out{};
    ctx_in.priority = prio_in;
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt.data(), .data_out = r.out.data(),
                .data_size_in = static_cast<uint32_t>(pkt.size()),
                .data_size_out = static_cast<uint32_t>(r.out.size()), .ctx_in = &ctx_in,
                .ctx_out = &ctx_out, .ctx_size_in = sizeof(ctx_in), .ctx_size_out = sizeof(ctx_out),
                .repeat = 1);
    EXPECT_EQ(bpf_prog_test_run_opts(skel_->egress_fd(), &opts), 0) << std::strerror(errno);
    r.out.resize(pkt.size());
    r.priority = ctx_out.priority;
    return r;
  }

  dp_counters counters(uint32_t rail, uint32_t cls) {
    uint32_t key = rail * DP_MAX_CLASSES + cls;
    auto v = skel_->dp_counters().lookup(key);
    EXPECT_TRUE(v);
    return v ? dp::sum_counters(*v) : dp_counters{};
  }
  uint64_t exception(uint32_t rail, int reason) {
    uint32_t key = rail * DP_EXC_MAX + static_cast<uint32_t>(reason);
    auto v = skel_->dp_exceptions().lookup(key);
    uint64_t s = 0;
    if (v)
      for (auto x : *v) s += x;
    return s;
  }
  uint64_t all_exceptions() {
    uint64_t s = 0;
    for (uint32_t r = 0; r <= DP_MAX_RAILS; ++r)
      for (int e = 0; e < DP_EXC_MAX; ++e) s += exception(r, e);
    return s;
  }

  std::unique_ptr<dp::DpSkeleton> skel_;
  dp::Policy policy_;
  uint32_t version_ = 0;
};

// ---------------------------------------------------------------- fixture table

struct Case {
  const char* name;
  PacketSpec pkt;
  uint32_t mark;
  int want_ret;        // DP_PASS or TC_ACT_REDIRECT
  int want_class;      // class slot counted (tx or redirect), DP_CLASS_UNCLASSIFIED, or -1
  int want_exception;  // dp_exception on rail0, or -1 for none
};

PacketSpec tcp4(uint16_t sport, uint16_t dport) { return {4, IPPROTO_TCP, sport, dport}; }
PacketSpec udp4(uint16_t sport, uint16_t dport) { return {4, IPPROTO_UDP, sport, dport}; }
PacketSpec tcp6(uint16_t sport, uint16_t dport) { return {6, IPPROTO_TCP, sport, dport}; }
PacketSpec udp6(uint16_t sport, uint16_t dport) { return {6, IPPROTO_UDP, sport, dport}; }
PacketSpec with(PacketSpec s, void (*f)(PacketSpec&)) {
  f(s);
  return s;
}

const Case kCases[] = {
    {"v4_tcp_dst_port_on_this_rail_stays", tcp4(40000, 50001), 0, DP_PASS, kDispatch, -1},
    {"v4_tcp_dst_port_of_other_rail_redirects", tcp4(40000, 52001), 0, TC_ACT_REDIRECT, kParamSync,
     -1},
    {"v4_tcp_src_port_of_other_rail_redirects", tcp4(52001, 40000), 0, TC_ACT_REDIRECT, kParamSync,
     -1},
    {"v4_udp_logs_redirects", udp4(40000, 54001), 0, TC_ACT_REDIRECT, kLogs, -1},
    {"v6_udp_logs_redirects", udp6(40000, 54000), 0, TC_ACT_REDIRECT, kLogs, -1},
    {"v6_tcp_control_stays", tcp6(40000, 53000), 0, DP_PASS, kControl, -1},
    {"v6_tcp_combine_src_port_stays", tcp6(51000, 33333), 0, DP_PASS, kCombine, -1},
    {"mark_beats_port", tcp4(40000, 50001), 0x54, TC_ACT_REDIRECT, kLogs, -1},
    {"unknown_mark_falls_back_to_port", tcp4(40000, 52001), 0x999, TC_ACT_REDIRECT, kParamSync, -1},
    // the probe of dpctl validate/probe, or any socket given a path's fwmark
    {"path_fwmark_is_never_steered", tcp4(40000, 52001), 0x100, DP_PASS, DP_CLASS_UNCLASSIFIED, -1},
    {"dst_port_beats_src_port", tcp4(52001, 50001), 0, DP_PASS, kDispatch, -1},
    {"already_redirected_passes_untouched", tcp4(40000, 52001), DP_MARK_REDIRECTED, DP_PASS,
     kParamSync, -1},
    {"udp_on_tcp_only_class_is_unclassified", udp4(40000, 52001), 0, DP_PASS, DP_CLASS_UNCLASSIFIED,
     -1},
    {"unclassified_port_passes", tcp4(40000, 40001), 0, DP_PASS, DP_CLASS_UNCLASSIFIED, -1},
    {"v6_hop_by_hop_then_tcp_is_followed",
     with(tcp6(40000, 52001), [](PacketSpec& s) { s.v6_hop_by_hop = true; }), 0, TC_ACT_REDIRECT,
     kParamSync, -1},
    {"v4_fragment_passes", with(tcp4(40000, 52001), [](PacketSpec& s) { s.v4_fragment = true; }), 0,
     DP_PASS, -1, DP_EXC_FRAGMENT},
    {"v6_fragment_header_passes",
     with(udp6(40000, 54000), [](PacketSpec& s) { s.v6_fragment_hdr = true; }), 0, DP_PASS, -1,
     DP_EXC_FRAGMENT},
    {"truncated_tcp_header_passes",
     with(tcp4(40000, 52001), [](PacketSpec& s) { s.truncate_to = 14 + 20 + 10; }), 0, DP_PASS, -1,
     DP_EXC_SHORT},
    // The kernel's test-run refuses an untagged IP frame with a truncated IP
    // header (-EINVAL), so truncated L3 headers are fed behind a VLAN tag.
    {"vlan_tagged_tcp_is_classified",
     with(tcp4(40000, 52001), [](PacketSpec& s) { s.vlan = true; }), 0, TC_ACT_REDIRECT, kParamSync,
     -1},
    {"truncated_ipv4_header_passes",
     with(tcp4(40000, 52001),
          [](PacketSpec& s) {
            s.vlan = true;
            s.truncate_to = 18 + 10;
          }),
     0, DP_PASS, -1, DP_EXC_SHORT},
    {"truncated_ipv6_header_passes",
     with(tcp6(40000, 52001),
          [](PacketSpec& s) {
            s.vlan = true;
            s.truncate_to = 18 + 30;
          }),
     0, DP_PASS, -1, DP_EXC_SHORT},
    {"truncated_vlan_tag_passes",
     with(tcp4(40000, 52001),
          [](PacketSpec& s) {
            s.vlan = true;
            s.truncate_to = 16;
          }),
     0, DP_PASS, -1, DP_EXC_SHORT},
    {"arp_passes", with(tcp4(1, 2), [](PacketSpec& s) { s.ethertype = 0x0806; }), 0, DP_PASS, -1,
     DP_EXC_NON_IP},
    {"icmp_passes", with(tcp4(1, 2), [](PacketSpec& s) { s.proto = IPPROTO_ICMP; }), 0, DP_PASS, -1,
     DP_EXC_OTHER_L4},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ClassifierTable : public Classifier, public ::testing::WithParamInterface<Case> {};

TEST_P(ClassifierTable, Verdict) {
  const Case& c = GetParam();
  auto r = egress(c.pkt, c.mark);
  EXPECT_EQ(r.ret, c.want_ret) << c.name;
  if (c.want_ret == TC_ACT_REDIRECT) {
    EXPECT_EQ(r.mark_out, c.mark | DP_MARK_REDIRECTED)
        << "a redirected packet carries the mark bit";
    EXPECT_EQ(counters(0, static_cast<uint32_t>(c.want_class)).redirect_packets, 1u);
    EXPECT_EQ(counters(0, static_cast<uint32_t>(c.want_class)).tx_packets, 0u)
        << "tx is counted where the packet leaves, not here";
  } else {
    EXPECT_EQ(r.mark_out & DP_MARK_REDIRECTED, 0u) << "the redirect bit never leaves the hook";
    if (c.want_class >= 0) {
      EXPECT_EQ(counters(0, static_cast<uint32_t>(c.want_class)).tx_packets, 1u);
    }
  }
  if (c.want_exception >= 0) {
    EXPECT_EQ(exception(0, c.want_exception), 1u);
    EXPECT_EQ(all_exceptions(), 1u);
    EXPECT_EQ(counters(0, DP_CLASS_UNCLASSIFIED).tx_packets, 1u)
        << "passed packets are still counted";
  } else {
    EXPECT_EQ(all_exceptions(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ClassifierTable, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::string(p.param.name);
                         });

// ---------------------------------------------------------------- state and edge cases

// Issue 14: other users of skb->mark (Calico, Cilium, kube-proxy) keep
// their bits. With [routing] mark_mask = 0xffff and redirect_mark = 0x8000,
// only the low 16 bits classify, and a redirect sets 0x8000 and nothing else.
TEST_F(Classifier, MarkBitsOutsideTheMaskAreOthersAndKept) {
  uint32_t zero = 0;
  dp_mark_bits bits{0xffff, 0x8000};
  ASSERT_TRUE(skel_->dp_mark_bits().update(zero, bits));
  // logs' mark 0x54 under a foreign 0xabc00000: still logs, redirected to rail1
  auto r = egress(tcp4(40000, 40001), 0xabc00054);
  EXPECT_EQ(r.ret, TC_ACT_REDIRECT);
  EXPECT_EQ(r.mark_out, 0xabc00054u | 0x8000u) << "foreign bits kept, our redirect bit set";
  EXPECT_EQ(counters(0, kLogs).redirect_packets, 1u);
  // the foreign bits alone classify nothing (port 40001 is no class's)
  r = egress(tcp4(40000, 40001), 0xabc00000);
  EXPECT_EQ(r.ret, DP_PASS);
  EXPECT_EQ(r.mark_out, 0xabc00000u);
  // a packet redirected here: passed, our bit cleared, the others' kept
  r = egress(tcp4(40000, 52001), 0xabc08000);
  EXPECT_EQ(r.ret, DP_PASS);
  EXPECT_EQ(r.mark_out, 0xabc00000u);
  // 0x40000000 is just someone else's bit now: param-sync is steered as usual
  r = egress(tcp4(40000, 52001), 0x40000000);
  EXPECT_EQ(r.ret, TC_ACT_REDIRECT);
  EXPECT_EQ(r.mark_out, 0x40008000u);
}

TEST_F(Classifier, FlowTableRemembersClassAndRail) {
  PacketSpec s = tcp4(40000, 52001);
  ASSERT_EQ(egress(s).ret, TC_ACT_REDIRECT);
  ASSERT_EQ(egress(s).ret, TC_ACT_REDIRECT);
  auto key = dptest::flow_key_of(s);
  dp_flow f{};
  ASSERT_TRUE(skel_->dp_flows().lookup(key, &f));
  EXPECT_EQ(f.cls, kParamSync);
  EXPECT_EQ(f.rail, 1);
  EXPECT_EQ(f.packets, 2u);
  EXPECT_EQ(counters(1, kParamSync).flows_placed, 1u);
}

// The daemon reads a large flow table a slice per tick (Map::sweep): every
// flow that stays in the table is seen exactly once per sweep, also while
// flows come and go between slices.
TEST_F(Classifier, AFlowTableSweepSeesEveryStayingFlowOnceASliceAtATime) {
  auto flows = skel_->dp_flows();
  auto key = [](uint32_t i) {
    dp_flow_key k{};
    k.saddr[3] = htonl(0x0a000001);
    k.daddr[3] = htonl(0x0a000002 + (i >> 16));
    k.sport = htons(static_cast<uint16_t>(i));
    k.dport = htons(52001);
    k.proto = IPPROTO_TCP;
    return k;
  };
  constexpr uint32_t kFlows = 5000, kGone = 1000, kNew = 1000;
  for (uint32_t i = 0; i < kFlows; ++i) {
    dp_flow f{};
    f.bytes = i;  // which flow it is
    ASSERT_TRUE(flows.update(key(i), f));
  }
  std::vector<int> seen(kFlows + kNew, 0);
  dp::Map<dp_flow_key, dp_flow>::Cursor c;
  int slices = 0;
  bool done = false;
  while (!done) {
    size_t read = 0;
    done = flows.sweep(c, 1024, [&](const dp_flow_key&, const dp_flow& f) {
      ++seen.at(f.bytes);
      ++read;
    });
    ++slices;
    // the kernel's batches end at a bucket's end, so a slice reads its
    // budget and at most one batch (1,024) more
    if (!done) {
      EXPECT_TRUE(read >= 1024 && read < 2048) << "slice " << slices << ": " << read;
    }
    ASSERT_LT(slices, 100) << "the sweep never ends";
    if (slices == 2) {  // between two slices: some flows end, new ones begin
      for (uint32_t i = 0; i < kGone; ++i) ASSERT_TRUE(flows.remove(key(i)));
      for (uint32_t i = kFlows; i < kFlows + kNew; ++i) {
        dp_flow f{};
        f.bytes = i;
        ASSERT_TRUE(flows.update(key(i), f));
      }
    }
  }
  // 4,000 to 6,000 flows at 1,024 to 2,047 a slice (how many depends on the
  // map's hash seed: which buckets the removed and new flows fall in)
  EXPECT_GE(slices, 2) << "read a slice at a time, not whole";
  for (uint32_t i = kGone; i < kFlows; ++i) EXPECT_EQ(seen[i], 1) << "flow " << i;
  for (uint32_t i = 0; i < kFlows + kNew; ++i) EXPECT_LE(seen[i], 1) << "flow " << i;
  EXPECT_FALSE(c.started) << "the next sweep starts at the beginning";
  size_t again = 0;
  EXPECT_TRUE(flows.sweep(c, SIZE_MAX, [&](const dp_flow_key&, const dp_flow&) { ++again; }));
  EXPECT_EQ(again, kFlows - kGone + kNew);
}

TEST_F(Classifier, DecisionChangeMovesAnExistingFlow) {
  PacketSpec s = tcp4(40000, 52001);
  ASSERT_EQ(egress(s).ret, TC_ACT_REDIRECT);
  set_decision(kParamSync, 0);
  EXPECT_EQ(egress(s).ret, DP_PASS) << "the flow follows its class to rail0";
  auto key = dptest::flow_key_of(s);
  dp_flow f{};
  ASSERT_TRUE(skel_->dp_flows().lookup(key, &f));
  EXPECT_EQ(f.rail, 0);
  EXPECT_EQ(f.replacements, 1u);
  EXPECT_EQ(counters(0, kParamSync).flows_replaced, 1u);
  set_decision(kParamSync, 1);
  EXPECT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "and back";
}

TEST_F(Classifier, DisabledTargetRailPassesOnTheRoutedRail) {
  set_rail(1, kRail1Ifindex, false, true, true);
  EXPECT_EQ(egress(tcp4(40000, 52001)).ret, DP_PASS);
  EXPECT_EQ(counters(0, kParamSync).tx_packets, 1u);
  EXPECT_EQ(counters(0, kParamSync).redirect_packets, 0u);
}

TEST_F(Classifier, RailWithoutIfindexIsNeverATarget) {
  set_rail(1, 0, true, true, true);
  EXPECT_EQ(egress(tcp4(40000, 52001)).ret, DP_PASS);
}

TEST_F(Classifier, MissingGatewayOfTheFamilyPasses) {
  set_rail(1, kRail1Ifindex, true, true, false);
  EXPECT_EQ(egress(udp6(40000, 54000)).ret, DP_PASS);
  EXPECT_EQ(exception(0, DP_EXC_NO_GATEWAY), 1u);
  EXPECT_EQ(egress(udp4(40000, 54000)).ret, TC_ACT_REDIRECT) << "IPv4 still has its gateway";
}

TEST_F(Classifier, UnknownInterfacePasses) {
  uint32_t ifidx = kLoIfindex;
  ASSERT_TRUE(skel_->set_rail_ifindex(ifidx, std::nullopt));
  EXPECT_EQ(egress(tcp4(40000, 52001)).ret, DP_PASS);
  EXPECT_EQ(exception(DP_MAX_RAILS, DP_EXC_UNKNOWN_IFINDEX), 1u);
}

TEST_F(Classifier, RailIfindexIsDirectBelowTheLimitAndHashedAbove) {
  ASSERT_TRUE(skel_->set_rail_ifindex(7, 1));
  ASSERT_TRUE(skel_->set_rail_ifindex(DP_IFINDEX_DIRECT + 5, 1));
  uint32_t direct = 0, idx = 7, big = DP_IFINDEX_DIRECT + 5;
  dp_ifindex_val hv{};
  ASSERT_TRUE(skel_->dp_rail_by_ifindex().lookup(idx, &direct));
  EXPECT_EQ(direct, 2u) << "slot + 1";
  EXPECT_TRUE(skel_->dp_ifindex().lookup(big, &hv));
  EXPECT_EQ(hv.rail, 1u);
  ASSERT_TRUE(skel_->set_rail_ifindex(7, std::nullopt));
  ASSERT_TRUE(skel_->dp_rail_by_ifindex().lookup(idx, &direct));
  EXPECT_EQ(direct, 0u);
  EXPECT_FALSE(skel_->dp_ifindex().lookup(idx, &hv));
}

// ---------------------------------------------------------------- flowlets

TEST_F(Classifier, PacketsOfOneFlowletStayOnOneRail) {
  set_config(
      0, DP_CLASS_NONE,
      1'000'000'000);  // 1 s gap: back-to-back runs are one flowlet, even on a loaded machine
  set_shares(kParamSync, 5000, 5000);
  int on_rail1 = 0;
  for (uint16_t f = 0; f < 200; ++f) {
    PacketSpec s = tcp4(static_cast<uint16_t>(20000 + f), 52001);
    int first = egress(s).ret;
    on_rail1 += first == TC_ACT_REDIRECT;
    for (int i = 0; i < 20; ++i) ASSERT_EQ(egress(s).ret, first) << "flow " << f << " packet " << i;
  }
  EXPECT_GT(on_rail1, 60) << "a 50/50 split places flows on both rails";
  EXPECT_LT(on_rail1, 140);
}

TEST_F(Classifier, ANewFlowletAfterTheGapFollowsTheShares) {
  set_config(0, DP_CLASS_NONE, 1);  // 1 ns gap: every timed packet starts a flowlet
  const int flows = 2000;
  auto sport = [](int f) { return static_cast<uint16_t>(10000 + f); };
  set_shares(kParamSync, 10000, 0);  // every flow starts on rail0
  for (int f = 0; f < flows; ++f)
    for (int i = 0; i < 2; ++i)  // created, then one untimed packet (coarse time)
      ASSERT_EQ(egress(tcp4(sport(f), 52001)).ret, DP_PASS);
  // Split 30/70. rail0 keeps a share, so without flowlets every flow would stay
  // there; with them, a flow's next flowlet is placed by the shares.
  set_shares(kParamSync, 3000, 7000);
  int moved_to_rail1 = 0;
  for (int f = 0; f < flows; ++f) {
    ASSERT_EQ(egress(tcp4(sport(f), 52001)).ret, DP_PASS)
        << "the first timed packet starts the clock";
    moved_to_rail1 += egress(tcp4(sport(f), 52001)).ret == TC_ACT_REDIRECT;
  }
  EXPECT_NEAR(moved_to_rail1, 0.7 * flows, 0.04 * flows) << "70% of new flowlets go to rail1";
  uint64_t flowlets = counters(0, kParamSync).flowlets + counters(1, kParamSync).flowlets;
  EXPECT_EQ(flowlets, static_cast<uint64_t>(flows));
  EXPECT_EQ(counters(1, kParamSync).flows_replaced, static_cast<uint64_t>(moved_to_rail1));
  // deterministic per (flow, flowlet number): a second table gives the same answer
  auto key = dptest::flow_key_of(tcp4(sport(0), 52001));
  dp_flow f{};
  ASSERT_TRUE(skel_->dp_flows().lookup(key, &f));
  EXPECT_EQ(f.flowlet, 2u);
}

TEST_F(Classifier, SharesOfNothingAndEverythingAreExact) {
  set_config(0, DP_CLASS_NONE, 1);
  for (auto [r0, r1, want] :
       {std::tuple{0, 10000, TC_ACT_REDIRECT}, std::tuple{10000, 0, DP_PASS}}) {
    set_shares(kParamSync, static_cast<uint16_t>(r0), static_cast<uint16_t>(r1));
    for (uint16_t f = 0; f < 300; ++f)
      for (int i = 0; i < 3; ++i)
        ASSERT_EQ(egress(tcp4(static_cast<uint16_t>(30000 + f), 52001)).ret, want)
            << "shares " << r0 << "/" << r1 << " flow " << f;
  }
  EXPECT_EQ(counters(0, kParamSync).flowlets + counters(1, kParamSync).flowlets, 0u)
      << "a class wholly on one rail needs no flowlet timing";
}

TEST_F(Classifier, CoarseTimeNeverStartsAFlowlet) {
  set_config(0, DP_CLASS_NONE, 1);
  set_shares(kParamSync, 10000, 0);  // whole on rail0: untimed
  PacketSpec s = tcp4(40404, 52001);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(egress(s).ret, DP_PASS);
  set_shares(kParamSync, 0, 0);
  set_shares(kParamSync, 1, 9999);  // now split
  EXPECT_EQ(egress(s).ret, DP_PASS) << "the first timed packet only starts the clock";
  EXPECT_EQ(counters(0, kParamSync).flowlets + counters(1, kParamSync).flowlets, 0u);
  egress(s);  // the gap (1 ns) has passed: a flowlet, placed anew
  EXPECT_EQ(counters(0, kParamSync).flowlets + counters(1, kParamSync).flowlets, 1u);
}

// ---------------------------------------------------------------- flowcells

namespace {

uint64_t mono_ns() {  // the clock bpf_ktime_get_ns() reads
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

PacketSpec big(PacketSpec s, size_t payload = 1400) {
  s.payload = payload;
  return s;
}

}  // namespace

class Cells : public Classifier {
 protected:
  // Cells of 2^shift bytes for param-sync (elastic), rails at the given
  // drain times; the class split 50/50 (the shares only say which rails may
  // take cells: completion time decides).
  void cells(uint32_t shift, uint32_t ns0, uint32_t ns1, uint32_t mask = 1u << kParamSync,
             uint32_t flags = 0) {
    uint32_t zero = 0;
    dp_cell_cfg cc{};
    cc.cell_shift = shift;
    cc.flags = flags;
    cc.class_mask = mask;
    cc.ns_per_kib[0] = ns0;
    cc.ns_per_kib[1] = ns1;
    ASSERT_TRUE(skel_->dp_cells().update(zero, cc));
    set_shares(kParamSync, 5000, 5000);
  }
  void set_vq(uint64_t f0, uint64_t f1) {
    uint32_t zero = 0;
    dp_vq vq{};
    vq.finish_ns[0] = f0;
    vq.finish_ns[1] = f1;
    ASSERT_TRUE(skel_->dp_vq().update(zero, vq));
  }
  dp_vq vq() {
    uint32_t zero = 0;
    dp_vq v{};
    EXPECT_TRUE(skel_->dp_vq().lookup(zero, &v));
    return v;
  }
  uint64_t rail_bytes(uint32_t rail) {  // param-sync bytes that left by rail
    // rail0's hook counts what stays; what it redirects leaves by rail1
    auto c0 = counters(0, kParamSync);
    return rail == 0 ? c0.tx_bytes : c0.redirect_bytes;
  }
};

TEST_F(Cells, ANewFlowGoesWhereItWouldFinishFirst) {
  cells(16, 8192, 32768);  // 1 Gbit and 250 Mbit: a 64 KiB cell takes 0.5 and 2.1 ms
  uint64_t now = mono_ns();
  set_vq(now + 10'000'000, 0);  // 10 ms queued on rail0, rail1 idle
  EXPECT_EQ(egress(tcp4(41000, 52001)).ret, TC_ACT_REDIRECT) << "rail1 finishes first";
  set_vq(0, now + 10'000'000);
  EXPECT_EQ(egress(tcp4(41001, 52001)).ret, DP_PASS) << "rail0 finishes first";
  set_vq(now + 1'000'000, 0);  // 1 ms on rail0: 1.5 ms to finish there, 2.1 ms on rail1
  EXPECT_EQ(egress(tcp4(41002, 52001)).ret, DP_PASS)
      << "a short queue on the fast rail still finishes before the slow rail";
}

TEST_F(Cells, EachCellJoinsItsRailsVirtualQueueAtTheRailsRate) {
  cells(16, 8192, 32768);
  set_vq(0, 0);
  uint64_t before = mono_ns();
  PacketSpec s = big(tcp4(41100, 52001));
  ASSERT_EQ(egress(s).ret, DP_PASS);
  uint64_t after = mono_ns();
  size_t len = build_packet(s).size();
  dp_vq v = vq();
  EXPECT_GE(v.finish_ns[0], before + len * 8) << "len bytes at 8 ns a byte";
  EXPECT_LE(v.finish_ns[0], after + len * 8);
  EXPECT_EQ(v.finish_ns[1], 0u) << "nothing went to rail1";
}

TEST_F(Cells, ABurstOfManyFlowsSplitsByCapacity) {
  // slow rails (1 Mbit/s and 250 kbit/s) so that the queues barely drain
  // while the test runs: what each rail gets follows completion time alone
  // (in any order: kept in order, flows this backlogged never leave rail0,
  // ACellThatWouldOvertakeItsOwnFlowStays)
  cells(12, 8'192'000, 32'768'000, 1u << kParamSync, DP_CELL_F_ANY_ORDER);
  set_vq(0, 0);
  for (int round = 0; round < 40; ++round)
    for (uint16_t f = 0; f < 8; ++f) egress(big(tcp4(static_cast<uint16_t>(42000 + f), 52001)));
  double r0 = static_cast<double>(rail_bytes(0)), r1 = static_cast<double>(rail_bytes(1));
  EXPECT_NEAR(r1 / (r0 + r1), 0.2, 0.05)
      << "4:1 capacities: a fifth on rail1 (" << r0 << " / " << r1 << " bytes)";
  dp_vq v = vq();
  double q0 = static_cast<double>(v.finish_ns[0]), q1 = static_cast<double>(v.finish_ns[1]);
  EXPECT_NEAR(q0 / q1, 1.0, 0.05) << "and both rails' queues end together";
}

TEST_F(Cells, InAnyOrderAFlowChangesRailOnlyAtACellBoundary) {
  // 16 KiB cells; flowcell_order = "any"
  cells(14, 8'192'000, 32'768'000, 1u << kParamSync, DP_CELL_F_ANY_ORDER);
  set_vq(0, 0);
  PacketSpec s = big(tcp4(43000, 52001));
  auto key = dptest::flow_key_of(s);
  int changes = 0;
  int last = egress(s).ret;
  for (int i = 0; i < 300; ++i) {
    dp_flow before{};
    ASSERT_TRUE(skel_->dp_flows().lookup(key, &before));
    size_t len = build_packet(s).size();
    int ret = egress(s).ret;
    if (ret != last) {
      ++changes;
      EXPECT_NE(before.bytes >> 14, (before.bytes + len) >> 14)
          << "packet " << i << " moved inside a cell";
    }
    last = ret;
  }
  EXPECT_GT(changes, 0) << "one flow alone still uses both rails, a cell at a time";
  EXPECT_GT(counters(0, kParamSync).flowlets + counters(1, kParamSync).flowlets, 20u)
      << "cells started are counted";
}

// flowcell_order = "keep" (the default): a cell goes to the rail where it
// would finish first only if it would start there after the flow's last byte
// leaves the rail it is on; otherwise it overtakes nothing and stays.
TEST_F(Cells, ACellThatWouldOvertakeItsOwnFlowStays) {
  for (uint32_t flags : {0u, static_cast<uint32_t>(DP_CELL_F_ANY_ORDER)}) {
    SCOPED_TRACE(flags ? "any order" : "keep order");
    // 4 KiB cells; slow rails (8 and 32 ms a KiB) so that the flow's own
    // bytes are still queued on rail0 when its second cell starts
    cells(12, 8'192'000, 32'768'000, 1u << kParamSync, flags);
    set_vq(0, 0);
    PacketSpec s = big(tcp4(static_cast<uint16_t>(44000 + flags), 52001));
    ASSERT_EQ(egress(s).ret, DP_PASS) << "the first cell: rail0 finishes first";
    ASSERT_EQ(egress(s).ret, DP_PASS);
    set_vq(mono_ns() + 60'000'000'000ull, 0);  // others fill rail0 for a minute
    int third = egress(s).ret;                 // the second cell starts with it
    if (flags)
      EXPECT_EQ(third, TC_ACT_REDIRECT) << "rail1 finishes first, whatever the order";
    else
      EXPECT_EQ(third, DP_PASS) << "on rail1 it would arrive before the flow's first cell";
  }
}

TEST_F(Cells, AFlowMovesOnceItsBytesHaveLeftTheRail) {
  cells(12, 8192, 32768);  // 1 Gbit and 250 Mbit: a packet leaves in ~12 us
  set_vq(0, 0);
  PacketSpec s = big(tcp4(44100, 52001));
  ASSERT_EQ(egress(s).ret, DP_PASS);
  ASSERT_EQ(egress(s).ret, DP_PASS);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the flow's bytes have left
  set_vq(mono_ns() + 60'000'000'000ull, 0);
  EXPECT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "nothing of the flow is left to overtake";
  dp_flow f{};
  ASSERT_TRUE(skel_->dp_flows().lookup(dptest::flow_key_of(s), &f));
  EXPECT_EQ(f.tail_ns, vq().finish_ns[1]) << "its tail is on rail1 now";
}

TEST_F(Cells, OnlyRailsWithAShareAndClassesInTheMaskTakeCells) {
  cells(12, 8'192'000, 32'768'000);
  uint64_t now = mono_ns();
  set_vq(now + 60'000'000'000ull, 0);  // rail0 a minute behind
  set_shares(kParamSync, 10000, 0);
  for (uint16_t f = 0; f < 20; ++f)
    EXPECT_EQ(egress(big(tcp4(static_cast<uint16_t>(44000 + f), 52001))).ret, DP_PASS)
        << "rail1 has no share";
  set_shares(kParamSync, 5000, 5000);
  set_rail(1, kRail1Ifindex, false, true, true);
  for (uint16_t f = 0; f < 20; ++f)
    EXPECT_EQ(egress(big(tcp4(static_cast<uint16_t>(44100 + f), 52001))).ret, DP_PASS)
        << "rail1 is disabled";
  set_rail(1, kRail1Ifindex, true, true, true);
  // expert-combine is split too but not in the mask: shares and hashing
  set_config(0, DP_CLASS_NONE, 0);
  set_shares(kCombine, 10000 - 1, 1);
  for (uint16_t f = 0; f < 20; ++f)
    EXPECT_EQ(egress(big(tcp4(static_cast<uint16_t>(44200 + f), 51001))).ret, DP_PASS)
        << "a 99.99% share keeps the flows of a class without cells on rail0";
}

// Bursts (abi.h, DP_CELL_F_BURSTS): param-sync placed a whole burst at a
// time; a burst ends at 50 ms without a packet. The packets of a burst are
// real time apart (one BPF_PROG_TEST_RUN each), so the gap must outlast any
// pause of a loaded machine or a sanitizer build between two of them (1 ms
// did not, in a CI run).
class Bursts : public Cells {
 protected:
  static constexpr uint64_t kGapNs = 50'000'000;
  void SetUp() override {
    Cells::SetUp();
    uint32_t zero = 0;
    dp_cell_cfg cc{};
    cc.flags = DP_CELL_F_BURSTS;
    cc.class_mask = 1u << kParamSync;
    ASSERT_TRUE(skel_->dp_cells().update(zero, cc));
    set_config(0, DP_CLASS_NONE, kGapNs);
  }
  void plan(const PacketSpec& s, uint32_t rail, uint32_t flags = 0) {
    dp_plan p{rail, 1, flags};
    ASSERT_TRUE(skel_->dp_plans().update(dptest::flow_key_of(s), p));
  }
  dp_flow flow(const PacketSpec& s) {
    dp_flow f{};
    EXPECT_TRUE(skel_->dp_flows().lookup(dptest::flow_key_of(s), &f));
    return f;
  }
  static void idle() { std::this_thread::sleep_for(std::chrono::milliseconds(150)); }
};

TEST_F(Bursts, AFlowsBurstsAreMeasuredAtTheIdleGapsThatEndThem) {
  set_shares(kParamSync, 10000, 0);  // whole on rail0: measured all the same
  PacketSpec s = big(tcp4(45000, 52001));
  uint32_t len = 0;
  for (int i = 0; i < 5; ++i) {
    auto r = egress(s);
    ASSERT_EQ(r.ret, DP_PASS);
  }
  len = static_cast<uint32_t>(flow(s).bytes / 5);
  idle();
  ASSERT_EQ(egress(s).ret, DP_PASS);
  dp_flow f = flow(s);
  EXPECT_EQ(f.last_burst, 5u * len) << "the burst the gap ended";
  EXPECT_EQ(f.burst_bytes, len) << "the one that began";
  EXPECT_EQ(f.flowlet, 2u);
  EXPECT_EQ(f.replacements, 0u);
}

TEST_F(Bursts, AFlowMovesToItsPlannedRailOnlyWhereABurstBegins) {
  set_shares(kParamSync, 10000, 0);  // the flow starts on rail0
  PacketSpec s = big(tcp4(45100, 52001));
  ASSERT_EQ(egress(s).ret, DP_PASS);
  set_shares(kParamSync, 5000, 5000);
  plan(s, 1);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(egress(s).ret, DP_PASS) << "in the middle of a burst it stays, planned or not";
  idle();
  EXPECT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "the next burst goes where it was planned";
  EXPECT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "and stays there";
  EXPECT_EQ(flow(s).replacements, 1u);
  plan(s, 0);
  EXPECT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "a new plan waits for the next burst too";
  idle();
  EXPECT_EQ(egress(s).ret, DP_PASS);
}

TEST_F(Bursts, ABurstThatOutgrowsItsPlanFinishesOnTheMainRail) {
  set_shares(kParamSync, 10000, 0);
  PacketSpec s = big(tcp4(45300, 52001));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(egress(s).ret, DP_PASS);
  const uint64_t len = flow(s).bytes / 5;
  set_shares(kParamSync, 8000, 2000);  // rail0 is the class's main rail
  plan(s, 1);
  idle();
  ASSERT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "planned for a burst of 5 packets";
  // past its last burst, half as large again and 64 KiB: back to rail0
  const uint64_t limit = 5 * len + 5 * len / 2 + 65536;
  int sent = 1, redirected = 1;
  while (sent * len <= limit + 2 * len) {
    redirected += egress(s).ret == TC_ACT_REDIRECT;
    ++sent;
  }
  EXPECT_EQ(static_cast<uint64_t>(redirected), limit / len + 1) << "moved once it outgrew";
  for (int i = 0; i < 20; ++i) EXPECT_EQ(egress(s).ret, DP_PASS) << "and stays for the burst";
  EXPECT_EQ(flow(s).replacements, 2u);
  idle();
  EXPECT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "the next burst follows the plan again";
}

// A stream (DP_PLAN_F_STREAM): a burst without end follows its plan at the
// next MiB it sends, without waiting for a gap, and a new burst at once.
TEST_F(Bursts, AStreamFollowsItsPlanInTheMiddleOfItsBurst) {
  set_shares(kParamSync, 10000, 0);
  PacketSpec s = big(tcp4(45400, 52001));
  ASSERT_EQ(egress(s).ret, DP_PASS);
  const uint64_t len = flow(s).bytes;
  set_shares(kParamSync, 8000, 2000);
  plan(s, 1);  // a burst plan: waits for a gap
  const uint64_t mib = 1u << DP_STREAM_STEP_SHIFT;
  while (flow(s).burst_bytes + len < mib) ASSERT_EQ(egress(s).ret, DP_PASS);
  EXPECT_EQ(egress(s).ret, DP_PASS) << "a burst plan does not move it at a MiB";
  plan(s, 1, DP_PLAN_F_STREAM);
  int sent = 0;
  while (egress(s).ret == DP_PASS) ASSERT_LT(++sent * len, mib + len) << "moved within a MiB";
  EXPECT_EQ(flow(s).replacements, 1u);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "and stays";
  plan(s, 0, DP_PLAN_F_STREAM);
  sent = 0;
  while (egress(s).ret == TC_ACT_REDIRECT) ASSERT_LT(++sent * len, mib + len) << "and back";
  EXPECT_EQ(flow(s).replacements, 2u);
  EXPECT_TRUE(flow(s).flags & DP_FLOW_F_STREAM);
  // where a burst begins, a stream goes where its plan says at once
  plan(s, 1, DP_PLAN_F_STREAM);
  idle();
  EXPECT_EQ(egress(s).ret, TC_ACT_REDIRECT);
  EXPECT_EQ(flow(s).replacements, 3u);
  // a plan that is no longer a stream's: bursts again, from the next one
  plan(s, 0);
  idle();
  EXPECT_EQ(egress(s).ret, DP_PASS);
  EXPECT_FALSE(flow(s).flags & DP_FLOW_F_STREAM);
}

TEST_F(Bursts, WithoutAPlanOrARailTheDecisionOpensAFlowStays) {
  set_shares(kParamSync, 10000, 0);
  std::vector<PacketSpec> flows;
  for (uint16_t i = 0; i < 20; ++i) {
    flows.push_back(big(tcp4(static_cast<uint16_t>(45200 + i), 52001)));
    ASSERT_EQ(egress(flows.back()).ret, DP_PASS);
  }
  plan(flows[0], 1);  // planned while the class is whole on rail0
  idle();
  ASSERT_EQ(egress(flows[0]).ret, DP_PASS) << "not split: the plan waits";
  set_shares(kParamSync, 5000, 5000);
  idle();
  for (size_t i = 1; i < flows.size(); ++i)
    EXPECT_EQ(egress(flows[i]).ret, DP_PASS) << "split, but no plan: no move by hash";
  set_rail(1, kRail1Ifindex, false, true, true);
  EXPECT_EQ(egress(flows[0]).ret, DP_PASS) << "its planned rail is disabled";
  set_rail(1, kRail1Ifindex, true, true, true);
  idle();
  EXPECT_EQ(egress(flows[0]).ret, TC_ACT_REDIRECT) << "the plan, once the rail is back";
}

TEST_F(Classifier, DefaultClassTakesUnmatchedTraffic) {
  set_config(0, kLogs);
  EXPECT_EQ(egress(tcp4(40000, 40001)).ret, TC_ACT_REDIRECT);
  EXPECT_EQ(counters(0, kLogs).redirect_packets, 1u);
}

TEST_F(Classifier, GenerationFlipSwitchesClassificationAtOnce) {
  // generation 1: port 50001 belongs to logs (rail1)
  auto p = policy_;
  p.classes[kDispatch].ports = {};
  p.classes[kDispatch].mark = 0x77;
  p.classes[kLogs].ports.push_back({dp::Proto::Tcp, 50001, 50001, 0, 0});
  write_ports(1, dp::encode_policy(p, {0, 1, 2, 3, 4}, {0, 1}));
  PacketSpec s = tcp4(40001, 50001);
  EXPECT_EQ(egress(s).ret, DP_PASS);
  set_config(1, DP_CLASS_NONE);
  EXPECT_EQ(egress(s).ret, TC_ACT_REDIRECT) << "the same flow is reclassified after the flip";
  set_config(0, DP_CLASS_NONE);
  EXPECT_EQ(egress(s).ret, DP_PASS);
}

TEST_F(Classifier, IngressCountsReceivedBytesPerClass) {
  auto r = run(skel_->ingress_fd(), tcp4(52001, 40000));
  EXPECT_EQ(r.ret, DP_PASS);
  EXPECT_EQ(counters(0, kParamSync).rx_packets, 1u);
  EXPECT_EQ(counters(0, kParamSync).tx_packets, 0u);
  run(skel_->ingress_fd(), with(tcp4(1, 2), [](PacketSpec& s) { s.ethertype = 0x0806; }));
  EXPECT_EQ(counters(0, DP_CLASS_UNCLASSIFIED).rx_packets, 1u);
}

// The shared topology with a multipath class: the rail a TCP SYN arrived on,
// kept for its SYN-ACK (which a request socket sends, with no arrival of its
// own), under the key the answer leaves with. Only SYNs, only on such rails.
TEST_F(Classifier, ASynsRailIsKeptForItsSynAckOnRailsUpForMultipath) {
  auto syn = [](uint16_t sport) {
    return with(tcp4(sport, 45000), [](PacketSpec& s) {
      s.syn = true;
      s.ack = false;
    });
  };
  auto kept = [&](const PacketSpec& s) {
    dp_flow_key k = flow_key_of(s), back{};  // the key as the SYN-ACK leaves
    std::memcpy(back.saddr, k.daddr, sizeof(back.saddr));
    std::memcpy(back.daddr, k.saddr, sizeof(back.daddr));
    back.sport = k.dport;
    back.dport = k.sport;
    back.proto = k.proto;
    uint32_t rail = 99;
    return skel_->dp_syn_rails().lookup(back, &rail).ok() ? rail : 99u;
  };
  run(skel_->ingress_fd(), syn(41000));
  EXPECT_EQ(kept(syn(41000)), 99u) << "a rail without DP_RAIL_F_MP_UP keeps nothing";
  dp_rail r = dp::encode_rail(policy_.paths[0], kLoIfindex, true, dp::Topology::Shared, true);
  ASSERT_TRUE(skel_->dp_rails().update(0, r));
  run(skel_->ingress_fd(), syn(41001));
  EXPECT_EQ(kept(syn(41001)), 0u);
  auto synack = with(syn(41002), [](PacketSpec& s) { s.ack = true; });
  run(skel_->ingress_fd(), synack);
  EXPECT_EQ(kept(synack), 99u) << "only a SYN";
  run(skel_->ingress_fd(), tcp4(41003, 45000));
  EXPECT_EQ(kept(tcp4(41003, 45000)), 99u) << "only a SYN";
}

TEST_F(Classifier, APolicedClassIsHeldToItsRateOnThatRailAndNoOtherIs) {
  // rail 0 polices the dispatch class: a bucket of 3 packets' bytes refilled
  // at 1 byte a second, so that nothing refills during the test
  const PacketSpec dispatch = tcp4(40000, 50001), control = tcp6(40000, 53000);
  const uint64_t len = build_packet(dispatch).size();
  dp_police p{};
  p.classes = 1u << kDispatch;
  p.rate = 1;
  p.burst = 3 * len;
  p.tokens = static_cast<__s64>(p.burst) * 1000000000;
  uint32_t rail = 0;
  ASSERT_TRUE(skel_->dp_police().update(rail, p));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(egress(dispatch).ret, DP_PASS) << "packet " << i;
  EXPECT_EQ(egress(dispatch).ret, TC_ACT_SHOT) << "the bucket is empty";
  EXPECT_EQ(egress(dispatch).ret, TC_ACT_SHOT);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(egress(control).ret, DP_PASS) << "control is not policed";
  EXPECT_EQ(counters(0, kDispatch).tx_packets, 3u) << "a dropped packet was not sent";
  auto drops = skel_->dp_police_drops().lookup(rail);
  ASSERT_TRUE(drops);
  dp_police_drops sum{};
  for (const auto& d : *drops) {
    sum.packets += d.packets;
    sum.bytes += d.bytes;
  }
  EXPECT_EQ(sum.packets, 2u);
  EXPECT_EQ(sum.bytes, 2 * len);
  // a class placed on another rail is policed by that rail's bucket: rail 1's is off
  set_decision(kDispatch, 1);
  EXPECT_EQ(egress(tcp4(40001, 50001)).ret, TC_ACT_REDIRECT);
  set_decision(kDispatch, 0);
  p.rate = 0;  // off
  ASSERT_TRUE(skel_->dp_police().update(rail, p));
  EXPECT_EQ(egress(dispatch).ret, DP_PASS);
}

TEST_F(Classifier, ClassQosStampsPriorityAndDscpAndKeepsTheChecksumAndEcn) {
  uint32_t slot = kControl;
  dp_class_qos q{0x10010, 46, DP_QOS_F_PRIORITY | DP_QOS_F_DSCP, {}, 0, 0, {}};
  ASSERT_TRUE(skel_->dp_class_qos().update(slot, q));
  constexpr size_t kL3 = 14;
  for (int fam : {4, 6}) {
    PacketSpec s = tcp4(40000, 53001);
    s.family = fam;
    s.tos = 0x01;  // ECT(1): the ECN bits must survive
    auto [priority, out] = egress_stamped(s);
    EXPECT_EQ(priority, 0x10010u) << "IPv" << fam;
    if (fam == 4) {
      EXPECT_EQ(out[kL3 + 1], (46 << 2) | 0x01) << "TOS: EF and ECT(1)";
      EXPECT_EQ(dptest::ipv4_header_sum(&out[kL3], 20), 0xffff)
          << "the header checksum still adds up";
    } else {
      uint32_t w = uint32_t{out[kL3]} << 24 | uint32_t{out[kL3 + 1]} << 16 |
                   uint32_t{out[kL3 + 2]} << 8 | out[kL3 + 3];
      EXPECT_EQ(w >> 28, 6u);
      EXPECT_EQ((w >> 20) & 0xff, (46u << 2) | 0x01) << "traffic class: EF and ECT(1)";
      EXPECT_EQ(w & 0xfffff, 0x12345u) << "the flow label is untouched";
    }
  }
  // a class without QoS is left as it came
  PacketSpec s = tcp4(40000, 52001);
  s.tos = 0x20;
  auto left = egress_stamped(s, 3);
  EXPECT_EQ(left.priority, 3u);
  EXPECT_EQ(left.out, build_packet(s));
}

// [qos] ack_skb_priority and ack_dscp: a class's pure ACKs (no data, no SYN,
// FIN or RST; TCP options allowed) get the ACK QoS, everything else the
// class's, or none where the class has none.
TEST_F(Classifier, PureAcksGetTheAckQos) {
  uint32_t dispatch = kDispatch, logs = kLogs;
  dp_class_qos q{};
  q.priority = 0x10014;
  q.dscp = 10;
  q.ack_priority = 0x10005;
  q.ack_dscp = 48;
  q.flags = DP_QOS_F_PRIORITY | DP_QOS_F_DSCP | DP_QOS_F_ACK_PRIORITY | DP_QOS_F_ACK_DSCP;
  ASSERT_TRUE(skel_->dp_class_qos().update(dispatch, q));
  dp_class_qos acks_only{};
  acks_only.ack_priority = 0x10005;
  acks_only.flags = DP_QOS_F_ACK_PRIORITY;
  ASSERT_TRUE(skel_->dp_class_qos().update(logs, acks_only));
  constexpr size_t kL3 = 14;
  struct Seen {
    uint32_t priority;
    uint8_t dscp;
  };
  auto run = [&](const PacketSpec& s) {
    auto [priority, out] = egress_stamped(s, 3);
    uint8_t tc = s.family == 4 ? out[kL3 + 1]
                               : static_cast<uint8_t>((out[kL3] & 0x0f) << 4 | out[kL3 + 1] >> 4);
    return Seen{priority, static_cast<uint8_t>(tc >> 2)};
  };
  for (int fam : {4, 6}) {
    SCOPED_TRACE(fam == 4 ? "IPv4" : "IPv6");
    PacketSpec ack = tcp4(40000, 50001);  // expert-dispatch
    ack.family = fam;
    ack.payload = 0;
    auto seen = run(ack);
    EXPECT_EQ(seen.priority, 0x10005u) << "a pure ACK";
    EXPECT_EQ(seen.dscp, 48);
    ack.tcp_options = 12;  // timestamps, as Linux sends them
    seen = run(ack);
    EXPECT_EQ(seen.priority, 0x10005u) << "a pure ACK with options";
    EXPECT_EQ(seen.dscp, 48);

    PacketSpec data = ack;
    data.payload = 1;
    seen = run(data);
    EXPECT_EQ(seen.priority, 0x10014u) << "one byte of data";
    EXPECT_EQ(seen.dscp, 10);
    PacketSpec fin = ack;
    fin.fin = true;
    EXPECT_EQ(run(fin).priority, 0x10014u) << "a FIN";
    PacketSpec synack = ack;
    synack.syn = true;
    EXPECT_EQ(run(synack).priority, 0x10014u) << "a SYN-ACK";
    PacketSpec udp = ack;
    udp.proto = IPPROTO_UDP;
    EXPECT_EQ(run(udp).priority, 0x10014u) << "an empty UDP datagram";

    // a class with ACK QoS only: its data keeps what it came with
    PacketSpec logs_ack = tcp4(40000, 54001);  // logs
    logs_ack.family = fam;
    logs_ack.payload = 0;
    EXPECT_EQ(run(logs_ack).priority, 0x10005u);
    logs_ack.payload = 100;
    seen = run(logs_ack);
    EXPECT_EQ(seen.priority, 3u);
    EXPECT_EQ(seen.dscp, 0);
  }
}

// dp-bench-classifier's object: its prelude runs whatever program it is given
// (the cost it adds is the same for every case), and the product's object
// holds no bench program (DpSkeleton::load checks it against kPrograms).
TEST_F(Classifier, TheBenchObjectRunsTheProgramItIsGiven) {
  dp_bench* b = dp_bench__open_and_load();
  ASSERT_NE(b, nullptr);
  int next = bpf_map__fd(b->maps.dp_bench_next),
      prelude = bpf_program__fd(b->progs.dp_bench_prelude);
  uint32_t slot = 0;
  EXPECT_EQ(run(prelude, tcp4(1, 2)).ret, TC_ACT_SHOT);  // nothing to run
  for (auto [prog, want] :
       {std::pair{b->progs.dp_empty, TC_ACT_OK}, std::pair{b->progs.dp_reference, DP_PASS}}) {
    int fd = bpf_program__fd(prog);
    ASSERT_EQ(bpf_map_update_elem(next, &slot, &fd, BPF_ANY), 0);
    EXPECT_EQ(run(prelude, tcp4(1, 2)).ret, want) << bpf_program__name(prog);
  }
  EXPECT_EQ(bpf_object__find_program_by_name(skel_->get()->obj, "dp_empty"), nullptr);
  dp_bench__destroy(b);
}

}  // namespace

// ---------------------------------------------------------------- classes by cgroup

namespace {

// This test process in a cgroup of its own (outer/inner under the cgroup v2
// root) for as long as it lives; moved back and both removed after, even
// when a test fails.
class ScopedCgroup {
 public:
  ScopedCgroup() {
    auto root = dp::cgroup2_root();
    auto own = dp::own_cgroup();
    if (!root || !own) return;
    root_ = *root;
    back_ = *root + *own;
    outer_ = fmt::format("{}/dp-test-{}", root_, ::getpid());
    inner_ = outer_ + "/inner";
    if (::mkdir(outer_.c_str(), 0755) != 0 || ::mkdir(inner_.c_str(), 0755) != 0) return;
    ok_ = join(inner_);
  }
  ~ScopedCgroup() {
    if (!back_.empty()) join(back_);
    ::rmdir(inner_.c_str());
    ::rmdir(outer_.c_str());
  }
  bool ok() const { return ok_; }
  const std::string& outer() const { return outer_; }
  const std::string& inner() const { return inner_; }

 private:
  static bool join(const std::string& dir) {
    std::ofstream procs(dir + "/cgroup.procs");
    procs << "0\n";
    procs.flush();
    return static_cast<bool>(procs);
  }
  std::string root_, back_, outer_, inner_;
  bool ok_ = false;
};

}  // namespace

TEST_F(Classifier, SocketsOfACgroupSubtreeTakeItsClassAfterMarksAndPorts) {
  ScopedCgroup cg;
  if (!cg.ok()) GTEST_SKIP() << "cannot make a cgroup v2 directory here";
  // BPF_PROG_TEST_RUN's skb has a socket of the calling process: its cgroup
  // is inner, whose parent the policy names
  auto outer = dp::cgroup_id(cg.outer());
  ASSERT_TRUE(outer) << outer.error().str();
  dp_cgroup_key k{*outer, 0, 0};
  dp_cgroup_val v{static_cast<uint8_t>(kCombine), {}};
  ASSERT_TRUE(skel_->dp_cgroups().update(k, v));
  auto rule_of = [&](const PacketSpec& s) {
    auto key = dptest::flow_key_of(s);
    dp_flow f{};
    EXPECT_TRUE(skel_->dp_flows().lookup(key, &f));
    return std::pair<int, int>{f.cls, f.rule};
  };

  // cgroup classification off in this generation: unclassified
  PacketSpec plain = tcp4(40000, 40001);
  EXPECT_EQ(egress(plain).ret, DP_PASS);
  EXPECT_EQ(counters(0, DP_CLASS_UNCLASSIFIED).tx_packets, 1u);

  set_config(0, DP_CLASS_NONE, 0, 1u << 0);
  PacketSpec by_cgroup = tcp4(40002, 40001);
  egress(by_cgroup);
  EXPECT_EQ(rule_of(by_cgroup), std::make_pair(kCombine, static_cast<int>(DP_RULE_CGROUP)));
  PacketSpec udp_v6 = udp6(40006, 40001);  // any protocol, any family: the socket's cgroup
  egress(udp_v6);
  EXPECT_EQ(rule_of(udp_v6), std::make_pair(kCombine, static_cast<int>(DP_RULE_CGROUP)));
  // ports come first, and a mark before them
  PacketSpec by_port = tcp4(40003, 52001);
  egress(by_port);
  EXPECT_EQ(rule_of(by_port), std::make_pair(kParamSync, static_cast<int>(DP_RULE_PORT)));
  PacketSpec by_mark = tcp4(40004, 40001);
  egress(by_mark, 0x54);
  EXPECT_EQ(rule_of(by_mark), std::make_pair(kLogs, static_cast<int>(DP_RULE_MARK)));

  // the answer for inner was cached: one lookup per packet
  auto inner = dp::cgroup_id(cg.inner());
  ASSERT_TRUE(inner);
  dp_cgroup_key ck{*inner, 0, 0};
  dp_cgroup_val cached{};
  ASSERT_TRUE(skel_->dp_cgroup_cache().lookup(ck, &cached));
  EXPECT_EQ(cached.cls, kCombine);

  // the other generation's cgroups are not this one's; after the flip with
  // none named there, the default class takes the packet
  set_config(1, DP_CLASS_NONE, 0, 1u << 0);
  write_ports(1, dp::encode_policy(policy_, {0, 1, 2, 3, 4}, {0, 1}));
  set_config(1, kControl, 0, 1u << 1);
  PacketSpec after_flip = tcp4(40005, 40001);
  egress(after_flip);
  EXPECT_EQ(rule_of(after_flip), std::make_pair(kControl, static_cast<int>(DP_RULE_DEFAULT)));
}

TEST_F(Classifier, TheDeepestNamedCgroupWins) {
  ScopedCgroup cg;
  if (!cg.ok()) GTEST_SKIP() << "cannot make a cgroup v2 directory here";
  auto outer = dp::cgroup_id(cg.outer()), inner = dp::cgroup_id(cg.inner());
  ASSERT_TRUE(outer && inner);
  dp_cgroup_key ko{*outer, 0, 0}, ki{*inner, 0, 0};
  dp_cgroup_val vo{static_cast<uint8_t>(kCombine), {}}, vi{static_cast<uint8_t>(kLogs), {}};
  ASSERT_TRUE(skel_->dp_cgroups().update(ko, vo));
  ASSERT_TRUE(skel_->dp_cgroups().update(ki, vi));
  set_config(0, DP_CLASS_NONE, 0, 1u << 0);
  PacketSpec s = tcp4(40010, 40001);
  egress(s);
  auto key = dptest::flow_key_of(s);
  dp_flow f{};
  ASSERT_TRUE(skel_->dp_flows().lookup(key, &f));
  EXPECT_EQ(f.cls, kLogs);
  EXPECT_EQ(f.rule, DP_RULE_CGROUP);
}
