// SPDX-License-Identifier: Apache-2.0
// dpctl diagnose's rules (core/diagnose.h) on plain inputs: each conclusion,
// from the figures that lead to it.
#include <gtest/gtest.h>

#include "dualpath/core/diagnose.h"

namespace {

using dp::json;

json healthy() { return {{"state", "up"}, {"seconds", 100.0}, {"reason", ""}, {"bfd", nullptr}}; }

json measured(double loss = 0, bool link_up = true) {
  return {{"loss", {{"ratio", loss}, {"window_s", 2.0}}},
          {"rtt", {{"p50_us", 80.0}, {"p95_us", 120.0}}},
          {"utilisation", 0.3},
          {"link", {{"oper_up", link_up}}}};
}

dp::DiagnoseInput two_rails() {
  dp::DiagnoseInput in;
  in.rails = {{"rail0", healthy(), measured(), {}}, {"rail1", healthy(), measured(), {}}};
  in.cpu_busy = {0.2, 0.3};
  in.seconds = 2;
  return in;
}

bool mentions(const std::vector<std::string>& lines, const std::string& what) {
  for (const auto& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

TEST(Diagnose, HealthyRailsAndAQuietNodeAreNoFault) {
  auto d = dp::diagnose(two_rails());
  EXPECT_EQ(d.kind, "none");
  EXPECT_TRUE(mentions(d.evidence, "CPU: busiest 30%")) << d.evidence.front();
  EXPECT_EQ(dp::conclusion_json(d)["kind"], "none");
}

TEST(Diagnose, AMultipathClassSeesFallbacksToTcpWhateverTheVerdict) {
  auto in = two_rails();
  in.multipath = true;
  in.mptcp_fallbacks = 3;
  in.mptcp_fallbacks_window = 1;
  in.peer_hint = "10.10.2.2";
  auto d = dp::diagnose(in);
  EXPECT_EQ(d.kind, "none");
  EXPECT_TRUE(mentions(d.evidence,
                       "3 connections of this node asked for MPTCP and fell back to "
                       "TCP (1 over the last 2 s)"));
  EXPECT_TRUE(mentions(d.next, "dpctl validate --peer 10.10.2.2 (its mptcp check"));
  in.rails[1].measure = measured(0.05);  // and beside a bad rail
  EXPECT_EQ(dp::diagnose(in).kind, "path");
  EXPECT_TRUE(mentions(dp::diagnose(in).evidence, "fell back to TCP"));
  // none without a multipath class (others' MPTCP sockets are theirs), or without fallbacks
  in.multipath = false;
  EXPECT_FALSE(mentions(dp::diagnose(in).evidence, "fell back"));
  in.multipath = true;
  in.mptcp_fallbacks = in.mptcp_fallbacks_window = 0;
  EXPECT_FALSE(mentions(dp::diagnose(in).evidence, "fell back"));
}

TEST(Diagnose, OneBadRailIsThatPathAndSaysWhatTheSchedulerDid) {
  auto in = two_rails();
  in.rails[1].measure = measured(0.05);  // 5% retransmitted
  in.events = json::array(
      {{{"time", "10:00:00"}, {"kind", "failover"}, {"path", "rail1"}, {"reason", "loss"}},
       {{"time", "10:00:01"}, {"kind", "spill"}, {"path", "rail0"}, {"reason", "load"}}});
  in.peer_hint = "10.0.0.2";
  auto d = dp::diagnose(in);
  EXPECT_EQ(d.kind, "path");
  EXPECT_EQ(d.path, "rail1");
  EXPECT_TRUE(mentions(d.evidence, "rail1: TCP retransmitted 5.0%"));
  ASSERT_EQ(d.scheduler.size(), 1u) << "only the events naming the bad rail";
  EXPECT_NE(d.scheduler[0].find("failover rail1"), std::string::npos);
  EXPECT_EQ(d.next.front(), "dpctl probe 10.0.0.2");
  EXPECT_EQ(dp::conclusion_json(d)["path"], "rail1");
}

TEST(Diagnose, BfdDownLinkDownAndUnansweredProbesEachMakeARailBad) {
  auto bfd = two_rails();
  bfd.rails[0].health["bfd"] = {{"state", "down"}, {"peer", "10.98.0.2"}, {"diag", "expired"}};
  EXPECT_EQ(dp::diagnose(bfd).path, "rail0");
  auto link = two_rails();
  link.rails[0].measure = measured(0, false);
  EXPECT_EQ(dp::diagnose(link).path, "rail0");
  auto probe = two_rails();
  probe.rails[0].probes = {{"10.0.0.2", false, "", 3, 5, std::nullopt}};
  auto d = dp::diagnose(probe);
  EXPECT_EQ(d.path, "rail0");
  EXPECT_TRUE(mentions(d.evidence, "probe to 10.0.0.2: 3 of 5 connects unanswered"));
  auto suspect = two_rails();
  suspect.rails[1].health["state"] = "suspect";
  EXPECT_EQ(dp::diagnose(suspect).path, "rail1");
}

TEST(Diagnose, ARailInHoldDownIsNotAFaultAndIsNotProbed) {
  auto in = two_rails();
  in.rails[0].health["state"] = "holddown";
  EXPECT_FALSE(dp::rail_usable(in.rails[0].health));
  EXPECT_TRUE(dp::rail_usable(in.rails[1].health));
  in.rails[0].probes = {{"10.0.0.2", true, "", 0, 0, std::nullopt}};
  auto d = dp::diagnose(in);
  EXPECT_EQ(d.kind, "none");
  EXPECT_TRUE(mentions(d.evidence, "rail0: not probed: failed over to another rail"));
}

TEST(Diagnose, EveryRailBadIsUpstream) {
  auto in = two_rails();
  in.rails[0].measure = measured(0.02);
  in.rails[1].health["bfd"] = {{"state", "down"}, {"peer", "x"}, {"diag", "expired"}};
  auto d = dp::diagnose(in);
  EXPECT_EQ(d.kind, "upstream");
  EXPECT_TRUE(mentions(d.evidence, "rail0:"));
  EXPECT_TRUE(mentions(d.evidence, "rail1: BFD to x down"));
}

TEST(Diagnose, TheNodeIsBlamedForACpuAtItsLimitOrConnectionsThatWait) {
  auto cpu = two_rails();
  cpu.cpu_busy = {0.95, 0.1};
  auto d = dp::diagnose(cpu);
  EXPECT_EQ(d.kind, "node");
  EXPECT_EQ(d.evidence.front(), "CPU: busiest 95%, mean 52% over 2 s");

  auto rwnd = two_rails();
  dp::DiagnoseClass c{"expert-combine", 4, 1000, 600, 0, 1 << 20, 0, 0, 0, {"10.0.0.2"}};
  rwnd.classes = {c};
  d = dp::diagnose(rwnd);
  EXPECT_EQ(d.kind, "node");
  EXPECT_TRUE(mentions(d.evidence, "waited for the receiver's window 60%"));
  EXPECT_TRUE(mentions(d.evidence, "to 10.0.0.2"));

  auto sndbuf = two_rails();
  sndbuf.classes = {{"logs", 1, 1000, 0, 700, 100, 0, 0, 0, {}}};
  EXPECT_TRUE(mentions(dp::diagnose(sndbuf).evidence, "send-buffer-limited 70%"));

  auto unread = two_rails();
  unread.classes = {{"logs", 1, 0, 0, 0, 0, 0, 1 << 20, 1, {}}};
  EXPECT_TRUE(mentions(dp::diagnose(unread).evidence, "not read by the application on 1 socket"));

  auto retrans = two_rails();
  retrans.classes = {{"logs", 1, 1000, 0, 0, 4096, 12, 0, 0, {}}};
  d = dp::diagnose(retrans);
  EXPECT_EQ(d.kind, "node");
  EXPECT_TRUE(mentions(d.evidence, "12 segments retransmitted while the rails are clean"));
}

TEST(Diagnose, ABadRailOutranksTheNode) {
  auto in = two_rails();
  in.cpu_busy = {1.0};
  in.rails[0].measure = measured(0.1);
  EXPECT_EQ(dp::diagnose(in).kind, "path");
}

}  // namespace
