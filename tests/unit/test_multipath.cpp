// SPDX-License-Identifier: Apache-2.0
// Multipath classes (core/multipath.h): the peer's address on each rail, the
// rail a subflow is on, and what a connection needs for each health and
// decision: subflows made and removed, roles from the decision, backoff.
#include <gtest/gtest.h>

#include <netinet/in.h>

#include <cstring>

#include "dualpath/abi.h"
#include "dualpath/core/encode.h"
#include "dualpath/core/multipath.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/scheduler.h"

namespace {

using dp::IpAddr;
using namespace dp::multipath;
using Kind = Action::Kind;

const char* kSeparate = R"([node]
name = "n1"
topology = "separate"

[[path]]
name = "rail0"
interface = "rail0"
gateway = "10.10.1.254"
gateway6 = "fd10:0:1::fe"
source = "10.10.1.1"
source6 = "fd10:0:1::1"
capacity = "1Gbit"
table = 100
fwmark = 0x100
routes = ["10.10.0.0/16", "fd10::/32"]

[[path]]
name = "rail1"
interface = "rail1"
gateway = "10.20.1.254"
gateway6 = "fd20:0:1::fe"
source = "10.20.1.1"
source6 = "fd20:0:1::1"
capacity = "1Gbit"
table = 101
fwmark = 0x101
routes = ["10.20.0.0/16", "fd20::/32"]

[[class]]
name = "collective"
kind = "elastic"
prefer = "rail0"
cgroups = ["/job"]
multipath = true
)";

dp::Policy policy(std::string text = kSeparate) {
  auto r = dp::parse_policy(text, "p.toml");
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].str());
  return *r.policy;
}

IpAddr ip(const char* s) { return *IpAddr::parse(s); }

// A connection to the peer's rail0 address with its first subflow on rail0.
Connection connected() {
  Connection c;
  c.token = 7;
  c.first = {ip("10.10.1.1"), ip("10.10.2.2"), 40000, 45000};
  c.subflows.push_back({c.first, 0, false});
  c.retry_after.assign(2, Time{});
  c.failures.assign(2, 0);
  return c;
}

Want want(bool up0, bool up1, bool on0, bool on1) { return {{up0, up1}, {{on0, on1}}}; }

}  // namespace

TEST(Multipath, ThePeerOnAnotherRailIsTheSameHostOnThatRailsNetwork) {
  auto p = policy();
  EXPECT_EQ(peer_on_path(p, ip("10.10.2.2"), 1)->str(), "10.20.2.2");
  EXPECT_EQ(peer_on_path(p, ip("10.20.2.2"), 0)->str(), "10.10.2.2");
  EXPECT_EQ(peer_on_path(p, ip("10.10.2.2"), 0)->str(), "10.10.2.2");
  EXPECT_EQ(peer_on_path(p, ip("fd10:0:2::2"), 1)->str(), "fd20:0:2::2");
  EXPECT_FALSE(peer_on_path(p, ip("192.168.1.1"), 1)) << "no rail's network holds it";
  EXPECT_FALSE(peer_on_path(p, ip("10.10.2.2"), 2)) << "no such rail";
}

TEST(Multipath, AHostPartThatDoesNotFitTheOtherNetworkHasNoPeer) {
  // rail1's network is a /24: host .2.2 of a /16 does not fit
  auto p = policy(std::string(kSeparate).replace(std::string(kSeparate).find("\"10.20.0.0/16\""),
                                                 14, "\"10.20.0.0/24\""));
  EXPECT_FALSE(peer_on_path(p, ip("10.10.2.2"), 1));
  EXPECT_EQ(peer_on_path(p, ip("10.10.0.9"), 1)->str(), "10.20.0.9");
}

// [[peer]]: a peer numbered differently on each rail is found by the table,
// for subflows and for connect-time placement (its dp_peers entries).
TEST(Multipath, APeerInThePeerTableIsFoundByItNotByItsHostPart) {
  auto p =
      policy(std::string(kSeparate) +
             "[[peer]]\nname = \"b\"\n"
             "addresses = { rail0 = [\"10.10.2.50\", \"fd10:0:2::50\"], rail1 = \"10.20.9.77\" }\n"
             "[[peer]]\naddresses = { rail0 = \"172.16.0.1\", rail1 = \"172.17.0.1\" }\n");
  ASSERT_EQ(p.peers.size(), 2u);
  EXPECT_EQ(peer_on_path(p, ip("10.10.2.50"), 1)->str(), "10.20.9.77");
  EXPECT_EQ(peer_on_path(p, ip("10.20.9.77"), 0)->str(), "10.10.2.50");
  EXPECT_FALSE(peer_on_path(p, ip("fd10:0:2::50"), 1)) << "the table has no IPv6 address on rail1";
  EXPECT_EQ(peer_on_path(p, ip("172.16.0.1"), 1)->str(), "172.17.0.1") << "outside every network";
  EXPECT_EQ(peer_on_path(p, ip("10.10.2.51"), 1)->str(), "10.20.2.51") << "not in it: host part";
  auto e = dp::encode_peers(p, {1, 0});  // path 0 in rail slot 1, path 1 in slot 0
  ASSERT_EQ(e.size(), 5u) << "one entry per address";
  const auto& [k, v] = e.front();  // 10.10.2.50
  EXPECT_EQ(k.family, AF_INET);
  EXPECT_EQ(v.rail, 1) << "the key's address is on path 0, in slot 1";
  EXPECT_EQ(v.has[0], 1);
  EXPECT_EQ(v.has[1], 1);
  EXPECT_EQ(std::memcmp(&v.addr[0][0], ip("10.20.9.77").bytes.data(), 4), 0);
}

TEST(Multipath, APeerTableMistakeIsRefusedWithItsLine) {
  auto expect_error = [](const std::string& extra, const std::string& want) {
    auto r = dp::parse_policy(std::string(kSeparate) + extra, "p.toml");
    std::string all;
    for (auto& e : r.errors) all += e.str() + "\n";
    EXPECT_NE(all.find(want), std::string::npos) << "got: " << all << "want: " << want;
  };
  expect_error("[[peer]]\naddresses = { rial1 = \"10.20.9.7\", rail0 = \"10.10.9.7\" }\n",
               ":36:23: error: [[peer]]: no path \"rial1\" in the policy; did you mean \"rail1\"?");
  expect_error("[[peer]]\nname = \"x\"\naddresses = { rail0 = \"10.10.9.7\" }\n",
               "peer \"x\" has an address on one path only");
  expect_error(
      "[[peer]]\naddresses = { rail0 = \"10.10.9.7\", rail1 = \"10.20.9.7\" }\n"
      "[[peer]]\nname = \"y\"\naddresses = { rail0 = \"10.10.9.7\", rail1 = \"10.20.9.8\" }\n",
      "peer \"y\": 10.10.9.7 is also [[peer]]'s address");
  expect_error("[[peer]]\naddresses = { rail0 = \"ten\", rail1 = \"10.20.9.8\" }\n",
               "addresses.rail0 must be an IP address");
  // the shared topology has one address per peer everywhere: no table
  std::string shared = kSeparate;
  shared.replace(shared.find("topology = \"separate\""), 21, "topology = \"shared\"");
  auto r = dp::parse_policy(
      shared + "[[peer]]\naddresses = { rail0 = \"10.10.9.7\", rail1 = \"10.20.9.7\" }\n",
      "p.toml");
  bool refused = false;
  for (auto& e : r.errors) refused |= e.message.find("[[peer]] is for the separate topology") == 0;
  EXPECT_TRUE(refused);
}

TEST(Multipath, ASubflowsRailIsItsDeviceElseItsSourceAddress) {
  auto p = policy();
  std::vector<uint32_t> ifx{11, 12};
  EXPECT_EQ(path_of(p, ifx, ip("10.20.1.1"), 0), 1u);
  EXPECT_EQ(path_of(p, ifx, ip("fd10:0:1::1"), 0), 0u);
  EXPECT_EQ(path_of(p, ifx, ip("10.10.1.1"), 12), 1u) << "the bound device decides";
  EXPECT_EQ(path_of(p, ifx, ip("192.168.0.1"), 0), kNoPath);
}

TEST(Multipath, TheConnectingSideMakesASubflowOnEveryOtherUsableRail) {
  auto p = policy();
  auto acts = reconcile(p, connected(), want(true, true, true, false), Time{});
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, Kind::Create);
  EXPECT_EQ(acts[0].path, 1u);
  EXPECT_TRUE(acts[0].backup) << "the decision gives rail1 no share";
  EXPECT_EQ(acts[0].ends.local.str(), "10.20.1.1");
  EXPECT_EQ(acts[0].ends.remote.str(), "10.20.2.2");
  EXPECT_EQ(acts[0].ends.rport, 45000);
  // a split class: a backup too, until it has been up kJoinSettle
  acts = reconcile(p, connected(), want(true, true, true, true), Time{});
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_TRUE(acts[0].backup);
  // the accepting side makes none
  auto accepted = connected();
  accepted.server_side = true;
  EXPECT_TRUE(reconcile(p, accepted, want(true, true, true, false), Time{}).empty());
}

TEST(Multipath, RolesFollowTheDecisionOnTheConnectingSideOnly) {
  auto p = policy();
  auto c = connected();
  c.subflows.push_back({{ip("10.20.1.1"), ip("10.20.2.2"), 40001, 45000}, 1, true});
  EXPECT_TRUE(reconcile(p, c, want(true, true, true, false), Time{}).empty()) << "as decided";
  auto acts = reconcile(p, c, want(true, true, false, true), Time{});  // class set ... rail1
  ASSERT_EQ(acts.size(), 2u);
  for (auto& a : acts) {
    EXPECT_EQ(a.kind, Kind::SetBackup);
    EXPECT_EQ(a.backup, a.path == 0);
  }
  c.server_side = true;
  EXPECT_TRUE(reconcile(p, c, want(true, true, false, true), Time{}).empty())
      << "the connecting side's MP_PRIO holds for both directions";
}

// A join carries nothing in its first kJoinSettle (an accepting kernel can
// place data sent on it at once at the wrong place in the stream): it is
// made a backup, made active once it has been up that long, and until then
// no other subflow is made a backup (the scheduler would then send on any,
// the young join too).
TEST(Multipath, AJoinIsMadeActiveOnlyOnceItHasBeenUpAWhileAndNothingStandsByBefore) {
  auto p = policy();
  const Time t0 = Time{} + std::chrono::hours(1);
  auto c = connected();
  c.subflows[0].up = t0;
  // the decision gives rail1 alone a share
  auto acts = reconcile(p, c, want(true, true, false, true), t0 + std::chrono::milliseconds(20));
  ASSERT_EQ(acts.size(), 1u) << "no rail1 subflow yet: the first one keeps carrying";
  EXPECT_EQ(acts[0].kind, Kind::Create);
  EXPECT_TRUE(acts[0].backup);
  Time up = t0 + std::chrono::milliseconds(21);
  c.subflows.push_back({{ip("10.20.1.1"), ip("10.20.2.2"), 40001, 45000}, 1, true, up});
  EXPECT_TRUE(reconcile(p, c, want(true, true, false, true), up + kJoinSettle / 2).empty())
      << "the join settles; rail0 stays active";
  acts = reconcile(p, c, want(true, true, false, true), up + kJoinSettle);
  ASSERT_EQ(acts.size(), 2u);
  for (auto& a : acts) {
    EXPECT_EQ(a.kind, Kind::SetBackup);
    EXPECT_EQ(a.backup, a.path == 0) << "rail1 carries, rail0 stands by";
  }
  // a split class: the join is made active when it has settled, the first
  // subflow stays active throughout
  acts = reconcile(p, c, want(true, true, true, true), up + kJoinSettle / 2);
  EXPECT_TRUE(acts.empty());
  acts = reconcile(p, c, want(true, true, true, true), up + kJoinSettle);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].path, 1u);
  EXPECT_FALSE(acts[0].backup);
}

// An elastic class uses every usable rail of comparable or wider capacity,
// whatever its decision; on a much slower rail, or for a latency-sensitive
// or pinned class, the decision alone opens rails.
TEST(Multipath, AnElasticClassIsActiveOnEveryComparableOrWiderRailTheDecisionAloneOpensTheRest) {
  auto p = policy();  // two 1 Gbit rails
  const dp::Shares on0{DP_SHARE_SCALE, 0};
  using V = std::vector<bool>;
  EXPECT_EQ(active_rails(p, 0, on0, {true, true}, false), (V{true, true})) << "equal rails";
  EXPECT_EQ(active_rails(p, 0, on0, {true, false}, false), (V{true, false})) << "rail1 unusable";
  EXPECT_EQ(active_rails(p, 0, on0, {true, true}, true), (V{true, false})) << "dpctl class set";
  EXPECT_EQ(active_rails(p, 0, {0, 0}, {true, true}, false), (V{false, false}))
      << "no decision yet: reconcile's own rule (every usable rail) applies";
  auto slow = p;
  slow.paths[1].capacity_bps = 250'000'000;  // 4:1
  EXPECT_EQ(active_rails(slow, 0, on0, {true, true}, false), (V{true, false}));
  EXPECT_EQ(active_rails(slow, 0, {0, DP_SHARE_SCALE}, {true, true}, false), (V{true, true}))
      << "a class put on the slower rail keeps the faster one";
  EXPECT_EQ(active_rails(slow, 0, {0, DP_SHARE_SCALE}, {false, true}, false), (V{false, true}))
      << "... while that one is usable";
  slow.paths[1].capacity_bps = 500'000'000;  // 2:1: comparable
  EXPECT_EQ(active_rails(slow, 0, on0, {true, true}, false), (V{true, true}));
  auto ls = p;
  ls.classes[0].kind = dp::ClassKind::LatencySensitive;
  EXPECT_EQ(active_rails(ls, 0, on0, {true, true}, false), (V{true, false}))
      << "a latency-sensitive class keeps the other rail as a backup";
}

// What the class is held to (dpctl class list, the carried-share check): its
// decision, unless its subflows are active where the decision gives nothing;
// then the active rails' capacities, as MPTCP fills every active subflow.
TEST(Multipath, SubflowsActiveBeyondTheDecisionAreHeldToTheActiveRailsCapacities) {
  auto p = policy();
  p.paths[1].capacity_bps = 250'000'000;  // 1G + 250M
  const dp::Shares on1{0, DP_SHARE_SCALE};
  EXPECT_EQ(subflow_shares(p, {true, true}, on1), (dp::Shares{8000, 2000}))
      << "moved to the narrow rail, it keeps the wide one: 4:1 by capacity";
  EXPECT_EQ(subflow_shares(p, {false, true}, on1), on1) << "only the decision's rail is active";
  EXPECT_EQ(subflow_shares(p, {true, true}, dp::Shares{6000, 4000}), (dp::Shares{6000, 4000}))
      << "a split decision is what the subflows are held to";
  EXPECT_EQ(subflow_shares(p, {false, false}, on1), on1) << "nothing active: the decision";
  p.paths[1].capacity_bps = 333'000'000;
  auto odd = subflow_shares(p, {true, true}, on1);
  EXPECT_EQ(odd[0] + odd[1], DP_SHARE_SCALE) << "the rounding goes to the widest rail";
  EXPECT_EQ(odd[1], 2498);
}

TEST(Multipath, AFailedRailsSubflowIsRemovedOnBothSidesAndNoneIsMadeThere) {
  auto p = policy();
  auto c = connected();
  c.subflows.push_back({{ip("10.20.1.1"), ip("10.20.2.2"), 40001, 45000}, 1, true});
  // rail0 failed: the decision moved to rail1
  auto acts = reconcile(p, c, want(false, true, false, true), Time{});
  ASSERT_EQ(acts.size(), 2u);
  EXPECT_EQ(acts[0].kind, Kind::Destroy);
  EXPECT_EQ(acts[0].path, 0u);
  EXPECT_EQ(acts[1].kind, Kind::SetBackup);
  EXPECT_FALSE(acts[1].backup) << "the survivor carries";
  c.server_side = true;
  acts = reconcile(p, c, want(false, true, false, true), Time{});
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, Kind::Destroy);
  // no rail with a share usable: every usable one is active
  c.server_side = false;
  c.subflows.erase(c.subflows.begin());
  c.subflows[0].backup = true;
  acts = reconcile(p, c, want(false, true, true, false), Time{});
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, Kind::SetBackup);
  EXPECT_FALSE(acts[0].backup);
}

// A join asked for again while the first request was still under way (its
// SYN lost and retransmitted) can come up beside it: the connecting side
// keeps one subflow per rail, and never removes the connection's first.
TEST(Multipath, ASecondSubflowOnARailIsRemovedByTheConnectingSide) {
  auto p = policy();
  auto c = connected();
  c.subflows.push_back({{ip("10.20.1.1"), ip("10.20.2.2"), 40001, 45000}, 1, true});
  c.subflows.push_back({{ip("10.20.1.1"), ip("10.20.2.2"), 40002, 45000}, 1, true});
  auto acts = reconcile(p, c, want(true, true, true, false), Time{});
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, Kind::Destroy);
  EXPECT_EQ(acts[0].path, 1u);
  EXPECT_EQ(acts[0].ends.lport, 40002) << "the later one";
  // a join on the first subflow's rail beside it: the join goes
  c = connected();
  c.subflows.insert(c.subflows.begin(),
                    {{ip("10.10.1.1"), ip("10.10.2.2"), 40003, 45000}, 0, false});
  c.subflows.push_back({{ip("10.20.1.1"), ip("10.20.2.2"), 40001, 45000}, 1, true});
  acts = reconcile(p, c, want(true, true, true, false), Time{});
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, Kind::Destroy);
  EXPECT_EQ(acts[0].ends.lport, 40003) << "never the connection's first";
  // the accepting side leaves that to the connecting side
  c.server_side = true;
  EXPECT_TRUE(reconcile(p, c, want(true, true, true, false), Time{}).empty());
}

TEST(Multipath, ARailWhoseSubflowFailedIsTriedAgainAfterABackoffThatDoubles) {
  auto p = policy();
  auto c = connected();
  Time t0 = Time{} + std::chrono::hours(1);
  note_failure(c, 1, t0);
  EXPECT_TRUE(reconcile(p, c, want(true, true, true, false), t0).empty());
  EXPECT_TRUE(
      reconcile(p, c, want(true, true, true, false), t0 + std::chrono::milliseconds(999)).empty());
  EXPECT_EQ(reconcile(p, c, want(true, true, true, false), t0 + std::chrono::seconds(1)).size(),
            1u);
  note_failure(c, 1, t0);
  EXPECT_TRUE(reconcile(p, c, want(true, true, true, false), t0 + std::chrono::seconds(1)).empty());
  EXPECT_EQ(reconcile(p, c, want(true, true, true, false), t0 + std::chrono::seconds(2)).size(),
            1u);
  note_failure(c, 1, t0);
  note_failure(c, 1, t0);
  EXPECT_EQ(c.retry_after[1] - t0, std::chrono::seconds(8)) << "capped";
}

TEST(Multipath, JoinsThatNeverComeUpAreAskedForOnlyEveryTenMinutesAfterSixAndSaidOnce) {
  auto p = policy();
  auto c = connected();
  Time t = Time{} + std::chrono::hours(1);
  // a middlebox drops every MP_JOIN on rail1: each join is never made
  for (int i = 1; i < kGiveUpAfter; ++i) {
    EXPECT_FALSE(note_failure(c, 1, t)) << i;
    EXPECT_LE(c.retry_after[1] - t, std::chrono::seconds(8)) << i;
    t = c.retry_after[1];
  }
  EXPECT_TRUE(note_failure(c, 1, t)) << "the sixth: the daemon says so";
  EXPECT_EQ(c.retry_after[1] - t, kGiveUpFor);
  EXPECT_TRUE(reconcile(p, c, want(true, true, true, false), t + std::chrono::minutes(9)).empty());
  EXPECT_EQ(reconcile(p, c, want(true, true, true, false), t + kGiveUpFor).size(), 1u)
      << "asked again once the pause is over";
  t += kGiveUpFor;
  EXPECT_FALSE(note_failure(c, 1, t)) << "said once";
  EXPECT_EQ(c.retry_after[1] - t, kGiveUpFor);
  // a join that comes up: joins get through again, the usual backoff
  note_closed(c, 1, t + std::chrono::seconds(1), t + std::chrono::seconds(1) + kLived);
  for (int i = 1; i < kGiveUpAfter; ++i) EXPECT_FALSE(note_failure(c, 1, t)) << i;
  EXPECT_LE(c.retry_after[1] - t, std::chrono::seconds(8));
}

TEST(Multipath, OneJoinPerRailIsUnderWayAtATimeAndOneUnansweredIsOverdueAfterTheTimeout) {
  auto p = policy();
  auto c = connected();
  Time t = Time{} + std::chrono::hours(1);
  auto w = want(true, true, true, false);
  ASSERT_EQ(reconcile(p, c, w, t).size(), 1u);
  note_asked(c, 1, t);
  // its SYN dropped: no second join is asked for while it is under way
  EXPECT_TRUE(reconcile(p, c, w, t + std::chrono::seconds(1)).empty());
  EXPECT_TRUE(overdue_joins(c, t + kJoinTimeout - std::chrono::milliseconds(1)).empty());
  EXPECT_EQ(overdue_joins(c, t + kJoinTimeout), std::vector<size_t>{1});
  // ended and counted as never made: asked for again after the backoff
  note_answered(c, 1);
  note_failure(c, 1, t + kJoinTimeout);
  EXPECT_TRUE(overdue_joins(c, t + std::chrono::minutes(1)).empty());
  EXPECT_TRUE(reconcile(p, c, w, t + kJoinTimeout).empty());
  EXPECT_EQ(reconcile(p, c, w, t + kJoinTimeout + std::chrono::seconds(1)).size(), 1u);
  // one answered at once is never overdue
  note_asked(c, 1, t);
  note_answered(c, 1);
  EXPECT_TRUE(overdue_joins(c, t + std::chrono::minutes(1)).empty());
}

TEST(Multipath, JoinsThePeerAcceptsAndClosesAtOnceAreNeverGivenUp) {
  auto c = connected();
  Time t = Time{} + std::chrono::hours(1);
  // the peer holds rail1 down for its hold-down: it accepts each join and
  // closes it within a tick; the rail must come back when the peer does
  for (int i = 0; i < 3 * kGiveUpAfter; ++i) {
    EXPECT_FALSE(note_closed(c, 1, t, t + std::chrono::milliseconds(50)));
    EXPECT_LE(c.retry_after[1] - t, std::chrono::milliseconds(50) + std::chrono::seconds(8));
    t = c.retry_after[1];
  }
}

TEST(Multipath, AJoinRefusedInTheConnectionsFirstSecondIsTriedAgainSoonOnce) {
  auto p = policy();
  auto c = connected();
  Time t0 = Time{} + std::chrono::hours(1);
  c.since = t0;
  note_failure(c, 1, t0 + std::chrono::milliseconds(30));
  EXPECT_EQ(c.retry_after[1] - t0, std::chrono::milliseconds(130))
      << "it likely overtook the first subflow's handshake at the peer";
  note_failure(c, 1, t0 + std::chrono::milliseconds(140));
  EXPECT_EQ(c.retry_after[1] - t0, std::chrono::milliseconds(2140)) << "then the usual backoff";
  auto old = connected();
  old.since = t0;
  note_failure(old, 1, t0 + std::chrono::seconds(5));
  EXPECT_EQ(old.retry_after[1] - t0, std::chrono::seconds(6)) << "an older connection backs off";
}

TEST(Multipath, AJoinThePeerClosesAtOnceBacksOffAndOneThatCarriedResetsTheBackoff) {
  auto p = policy();
  auto c = connected();
  Time t0 = Time{} + std::chrono::hours(1);
  // the peer holds rail1 down: each join it accepts is closed within a tick
  Time t = t0;
  for (auto wait : {1, 2, 4, 8, 8}) {
    note_closed(c, 1, t, t + std::chrono::milliseconds(50));
    EXPECT_EQ(c.retry_after[1] - t, std::chrono::milliseconds(50) + std::chrono::seconds(wait))
        << "a join closed at once is a failure of its rail, not a rail that works";
    t = c.retry_after[1];
  }
  // a join that carried the connection for a while and then ended
  note_closed(c, 1, t, t + kLived);
  EXPECT_EQ(c.retry_after[1] - t, kLived + std::chrono::seconds(1)) << "the backoff starts again";
  note_closed(c, 1, Time{}, t + std::chrono::seconds(9));
  EXPECT_EQ(c.retry_after[1] - t, std::chrono::seconds(11)) << "not known to have worked";
  // removed here after carrying the connection (its rail failed): the close
  // that follows is known only by its ends, and is the rail's first failure
  for (int i = 0; i < 3; ++i) note_failure(c, 1, t);
  note_removed(c, 1, t, t + std::chrono::seconds(30));
  note_closed(c, 1, Time{}, t + std::chrono::seconds(30));
  EXPECT_EQ(c.retry_after[1] - t, std::chrono::seconds(31)) << "made again after 1 s";
  note_removed(c, 1, t + std::chrono::seconds(40), t + std::chrono::seconds(40) + kLived / 2);
  note_closed(c, 1, Time{}, t + std::chrono::seconds(41));
  EXPECT_EQ(c.retry_after[1] - t, std::chrono::seconds(43)) << "one that barely lived: 2 s";
}

TEST(Multipath, TheResponderTakesAnMptcpPortPerRailAfterItsOwn) {
  // two rails: 7862 and 7863, and with a multipath class 7864 and 7865 for
  // dpctl validate's MPTCP check
  EXPECT_EQ(dp::responder_ports(policy()), 4u);
  std::string text = kSeparate;
  text.replace(text.find("multipath = true"), 16, "multipath = false");
  EXPECT_EQ(dp::responder_ports(policy(text)), 2u);
  // which the policy's checks count: 65533 fits two ports, not four
  EXPECT_TRUE(dp::parse_policy(text + "\n[responder]\nport = 65533\n", "p.toml").ok());
  auto r = dp::parse_policy(std::string(kSeparate) + "\n[responder]\nport = 65533\n", "p.toml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(
      r.errors[0].message.find("one port per rail and one per rail for MPTCP, 65533 to 65536"),
      std::string::npos)
      << r.errors[0].str();
}

TEST(Multipath, TheKeyNeedsAClassThatConvertsByCgroupOrUnitAndIsEncoded) {
  auto p = policy();
  ASSERT_TRUE(p.classes[0].multipath);
  EXPECT_EQ(dp::encode_class_tcp(p.classes[0]).flags & DP_CLASS_TCP_F_MULTIPATH,
            DP_CLASS_TCP_F_MULTIPATH);
  // ports and a mark cannot name the class at socket(): refused with the line
  std::string text = kSeparate;
  text.replace(text.find("cgroups = [\"/job\"]"), 18, "mark = 0x54");
  auto r = dp::parse_policy(text, "p.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u) << r.errors[0].str();
  EXPECT_EQ(r.errors[0].line, 34) << r.errors[0].str();
  EXPECT_NE(r.errors[0].message.find("needs MPTCP sockets"), std::string::npos)
      << r.errors[0].str();
  EXPECT_NE(r.errors[0].message.find("match the class by cgroups or units"), std::string::npos)
      << r.errors[0].str();
  // beside a class that converts its processes' sockets, a port class may
  // be multipath: their connections to its ports are MPTCP, and take its
  // decision and QoS
  text = std::string(kSeparate) +
         "\n[[class]]\nname = \"sync\"\nkind = \"elastic\"\nprefer = \"rail1\"\n"
         "skb_priority = 2\nports = [\"tcp:52000-52999\"]\nmultipath = true\n";
  p = policy(text);
  ASSERT_EQ(p.classes.size(), 2u);
  EXPECT_TRUE(p.classes[1].multipath);
  EXPECT_EQ(dp::encode_class_tcp(p.classes[1]).flags & DP_CLASS_TCP_F_MULTIPATH,
            DP_CLASS_TCP_F_MULTIPATH);
  // ... but not when that class is not multipath
  text.replace(text.find("multipath = true"), 16, "multipath = false");
  r = dp::parse_policy(text, "p.toml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("multipath in class \"sync\" needs MPTCP sockets"),
            std::string::npos)
      << r.errors[0].str();
  text = kSeparate;
  text.replace(text.find("multipath = true"), 16, "multipath = 1");
  r = dp::parse_policy(text, "p.toml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("must be true or false"), std::string::npos);
}
