// SPDX-License-Identifier: Apache-2.0
// Every policy error kind, with the line and column it is reported at.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>

#include <fstream>
#include <sstream>

#include "dualpath/abi.h"
#include "dualpath/core/encode.h"
#include "dualpath/core/policy.h"

namespace {

// A valid two-rail policy; tests patch it to make one mistake each.
const char* kBase = R"([node]
name = "n1"

[[path]]
name = "rail0"
interface = "eth0"
gateway = "10.0.0.1"
capacity = "200Gbit"
table = 100
fwmark = 0x100

[[path]]
name = "rail1"
interface = "eth1"
gateway6 = "fd00::1"
capacity = "50Gbit"
table = 101
fwmark = 0x101

[[class]]
name = "dispatch"
kind = "latency_sensitive"
priority = 6
prefer = "rail0"
ports = ["tcp:50000-50999"]

[[class]]
name = "logs"
kind = "elastic"
prefer = "rail1"
mark = 0x54
ports = ["tcp:54000-54099", "udp:514"]
)";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture text not found: " << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// Parses text and expects exactly one error, at `line`, containing `needle`.
void expect_one_error(const std::string& text, int line, const std::string& needle) {
  auto r = dp::parse_policy(text, "p.toml");
  ASSERT_FALSE(r.ok()) << "policy was accepted";
  ASSERT_EQ(r.errors.size(), 1u) << [&] {
    std::string all;
    for (auto& e : r.errors) all += e.str() + "\n";
    return all;
  }();
  EXPECT_EQ(r.errors[0].line, line) << r.errors[0].str();
  EXPECT_GT(r.errors[0].column, 0) << r.errors[0].str();
  EXPECT_NE(r.errors[0].message.find(needle), std::string::npos) << r.errors[0].str();
  EXPECT_EQ(r.errors[0].str().rfind("p.toml:" + std::to_string(line) + ":", 0), 0u);
}

}  // namespace

TEST(IpAddr, AnIpv4MappedAddressStandsForTheIpv4One) {
  auto mapped = dp::IpAddr::parse("::ffff:10.10.2.2");
  ASSERT_TRUE(mapped);
  EXPECT_EQ(mapped->family, AF_INET6);
  EXPECT_EQ(mapped->unmapped(), *dp::IpAddr::parse("10.10.2.2"));
  // others are themselves: IPv4, plain IPv6, and IPv4-compatible (::a.b.c.d)
  for (const char* a : {"10.10.2.2", "fd10:0:2::2", "::10.10.2.2", "::ffff:0:10.10.2.2"})
    EXPECT_EQ(dp::IpAddr::parse(a)->unmapped(), *dp::IpAddr::parse(a)) << a;
}

TEST(Policy, BaseIsValid) {
  auto r = dp::parse_policy(kBase, "p.toml");
  ASSERT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].str());
  const auto& p = *r.policy;
  EXPECT_EQ(p.node, "n1");
  ASSERT_EQ(p.paths.size(), 2u);
  EXPECT_EQ(p.paths[0].capacity_bps, 200'000'000'000ull);
  EXPECT_EQ(p.paths[1].gateway6->str(), "fd00::1");
  ASSERT_EQ(p.classes.size(), 2u);
  EXPECT_EQ(p.classes[1].ports[1].str(), "udp:514");
  EXPECT_EQ(*p.classes[1].mark, 0x54u);
  EXPECT_EQ(p.scheduler.load_threshold, 0.60);  // defaults
  EXPECT_EQ(p.health.multiplier, 3);
  EXPECT_EQ(p.hash.size(), 16u);
}

TEST(Policy, ShippedPoliciesAreValid) {
  for (const char* f :
       {"example-node.toml", "example-shared-node.toml", "lab-a.toml", "lab-b.toml"}) {
    auto r = dp::load_policy_file(std::string(DP_POLICY_DIR) + "/" + f);
    EXPECT_TRUE(r.ok()) << f << ": " << (r.errors.empty() ? "" : r.errors[0].str());
    if (r.ok()) {
      EXPECT_EQ(r.policy->classes.size(), 5u) << f;
    }
  }
}

TEST(Policy, TomlSyntaxErrorHasPosition) {
  expect_one_error(replace(kBase, "table = 100", "table = = 100"), 9, "");
}

TEST(Policy, UnknownKey) {
  expect_one_error(replace(kBase, "table = 100", "table = 100\ncolour = \"blue\""), 10,
                   "unknown key \"colour\"");
}

TEST(Policy, UnknownTopLevelSection) {
  expect_one_error(std::string(kBase) + "\n[sheduler]\ntick = \"50ms\"\n", 34,
                   "unknown key \"sheduler\"");
}

TEST(Policy, DuplicatePathName) {
  auto text = replace(replace(kBase, "name = \"rail1\"", "name = \"rail0\""), "prefer = \"rail1\"",
                      "prefer = \"rail0\"");
  expect_one_error(text, 13, "duplicate path name");
}

TEST(Policy, DuplicateClassName) {
  expect_one_error(replace(kBase, "name = \"logs\"", "name = \"dispatch\""), 28,
                   "duplicate class name");
}

TEST(Policy, OverlappingPortRanges) {
  expect_one_error(replace(kBase, "\"tcp:54000-54099\"", "\"tcp:50900-51000\""), 32,
                   "overlaps tcp:50000-50999 of class \"dispatch\"");
}

TEST(Policy, OverlapOnlyCountsSameProtocolAndDirection) {
  auto udp = replace(kBase, "\"tcp:54000-54099\"", "\"udp:50900-51000\"");
  EXPECT_TRUE(dp::parse_policy(udp, "p.toml").ok());
  auto src_dst = replace(replace(kBase, "\"tcp:54000-54099\"", "\"tcp:50900-51000\""),
                         "mark = 0x54", "mark = 0x54\nmatch = \"src\"");
  src_dst = replace(src_dst, "priority = 6", "priority = 6\nmatch = \"dst\"");
  EXPECT_TRUE(dp::parse_policy(src_dst, "p.toml").ok());
}

TEST(Policy, ReversedRange) {
  expect_one_error(replace(kBase, "tcp:50000-50999", "tcp:50999-50000"), 25, "reversed");
}

TEST(Policy, OutOfRangePort) {
  expect_one_error(replace(kBase, "udp:514", "udp:70000"), 32, "out of range");
  expect_one_error(replace(kBase, "udp:514", "udp:0"), 32, "out of range");
}

TEST(Policy, MalformedPortRange) {
  expect_one_error(replace(kBase, "udp:514", "sctp:514"), 32, "malformed");
}

TEST(Policy, PreferredPathMissing) {
  expect_one_error(replace(kBase, "prefer = \"rail1\"", "prefer = \"rail9\""), 30,
                   "prefers path \"rail9\", which the policy does not define");
}

TEST(Policy, BadBandwidthUnit) {
  expect_one_error(replace(kBase, "\"50Gbit\"", "\"50Gbps\""), 16, "ambiguous");
  expect_one_error(replace(kBase, "\"50Gbit\"", "\"50 furlongs\""), 16, "unknown unit");
}

TEST(Policy, BadDurationUnit) {
  expect_one_error(std::string(kBase) + "\n[health]\nholddown = \"5 minutes\"\n", 35,
                   "unknown unit");
}

TEST(Policy, MissingRequiredField) {
  expect_one_error(replace(kBase, "capacity = \"50Gbit\"\n", ""), 12,
                   "missing the required key \"capacity\"");
  expect_one_error(replace(kBase, "kind = \"elastic\"\n", ""), 27,
                   "missing the required key \"kind\"");
}

TEST(Policy, DuplicateFwmark) {
  expect_one_error(replace(kBase, "fwmark = 0x101", "fwmark = 0x100"), 18,
                   "fwmark 0x100 is used by more than one path");
}

TEST(Policy, DuplicateTable) {
  expect_one_error(replace(kBase, "table = 101", "table = 100"), 17,
                   "routing table 100 is used by more than one path");
}

TEST(Policy, KernelTableRefused) {
  expect_one_error(replace(kBase, "table = 101", "table = 254"), 17, "kernel's own");
}

TEST(Policy, DuplicateClassMark) {
  expect_one_error(replace(kBase, "priority = 6", "priority = 6\nmark = 0x54"), 32,
                   "already the mark of class \"dispatch\"");
}

TEST(Policy, ClassMarkEqualToPathFwmark) {
  expect_one_error(replace(kBase, "mark = 0x54", "mark = 0x100"), 31, "a path's fwmark");
}

TEST(Policy, ReservedMarkBit) {
  expect_one_error(replace(kBase, "mark = 0x54", "mark = 0x40000054"), 31, "reserves");
}

TEST(Policy, OutOfRangePriority) {
  expect_one_error(replace(kBase, "priority = 6", "priority = 9"), 23, "out of range (0 to 7)");
}

TEST(Policy, WrongType) {
  expect_one_error(replace(kBase, "table = 100", "table = \"100\""), 9, "must be an integer");
}

TEST(Policy, BadGatewayFamily) {
  expect_one_error(replace(kBase, "gateway = \"10.0.0.1\"", "gateway = \"fd00::9\""), 7,
                   "must be an IPv4 address");
}

TEST(Policy, ClassWithoutPortsOrMark) {
  expect_one_error(replace(kBase, "mark = 0x54\nports = [\"tcp:54000-54099\", \"udp:514\"]\n", ""),
                   27, "no ports, mark, cgroups or units");
  // an empty port list matches nothing either
  expect_one_error(
      replace(kBase, "mark = 0x54\nports = [\"tcp:54000-54099\", \"udp:514\"]\n", "ports = []\n"),
      31, "no traffic could ever match it");
}

TEST(Policy, ClassByCgroupAndUnit) {
  auto r = dp::parse_policy(
      replace(kBase, "mark = 0x54\nports = [\"tcp:54000-54099\", \"udp:514\"]\n",
              "cgroups = [\"/system.slice/vllm.service\", \"/kubepods.slice/x y\"]\n"
              "units = [\"sglang@0.service\"]\n"),
      "p.toml");
  ASSERT_TRUE(r.ok()) << r.errors[0].str();
  const auto& c = r.policy->classes.back();
  ASSERT_EQ(c.cgroups.size(), 3u);
  EXPECT_EQ(c.cgroups[0].str(), "cgroup /system.slice/vllm.service");
  EXPECT_EQ(c.cgroups[0].line, 31);
  EXPECT_EQ(c.cgroups[2].kind, dp::CgroupSpec::Kind::Unit);
  EXPECT_EQ(c.cgroups[2].str(), "unit sglang@0.service");
}

TEST(Policy, BadCgroupRulesRefusedWithTheirLine) {
  auto with = [](const std::string& rules) {
    return replace(kBase, "mark = 0x54\nports = [\"tcp:54000-54099\", \"udp:514\"]\n", rules);
  };
  expect_one_error(with("cgroups = [\"system.slice/x.service\"]\n"), 31, "starting with '/'");
  expect_one_error(with("cgroups = [\"/\"]\n"), 31, "root cgroup");
  expect_one_error(with("cgroups = [\"/a/../b\"]\n"), 31, "'.' or '..'");
  expect_one_error(with("cgroups = [\"/a//b\"]\n"), 31, "empty component");
  expect_one_error(with("cgroups = [\"/a/\"]\n"), 31, "end in '/'");
  expect_one_error(with("cgroups = \"/a\"\n"), 31, "must be an array");
  expect_one_error(with("cgroups = [1]\n"), 31, "must be strings");
  expect_one_error(with("units = [\"vllm\"]\n"), 31, "not a systemd unit name");
  expect_one_error(with("units = [\"a b.service\"]\n"), 31, "not a systemd unit name");
  expect_one_error(with("units = [\"x.service\", \"x.service\"]\n"), 31,
                   "unit x.service is already a rule of class \"logs\"");
}

TEST(Policy, NonFiniteNumbersRefused) {
  expect_one_error(std::string(kBase) + "\n[scheduler]\nload_threshold = nan\n", 35,
                   "must be above 0 and at most 1");
  expect_one_error(std::string(kBase) + "\n[scheduler]\newma_weight = inf\n", 35,
                   "must be above 0 and at most 1");
}

TEST(Policy, TimersTheWatchdogCannotLiveWithRefused) {
  expect_one_error(std::string(kBase) + "\n[scheduler]\ntick = \"1h\"\n", 35, "watchdog");
  expect_one_error(std::string(kBase) + "\n[health]\ninterval = \"10m\"\n", 35, "must be at most");
}

TEST(Policy, SuspectMovesAllOrLatencySensitive) {
  auto health = [](const std::string& line) {
    return std::string(kBase) + "\n[health]\n" + line + "\n";
  };
  auto base = dp::parse_policy(kBase, "test.toml");
  ASSERT_TRUE(base.ok());
  EXPECT_TRUE(base.policy->health.suspect_moves_elastic) << "the default is all";
  auto ls = dp::parse_policy(health("suspect_moves = \"latency_sensitive\""), "test.toml");
  ASSERT_TRUE(ls.ok());
  EXPECT_FALSE(ls.policy->health.suspect_moves_elastic);
  expect_one_error(health("suspect_moves = \"elastic\""), 35, "must be \"all\" or");
}

TEST(Policy, FlowcellsArePowersOfTwoOrOff) {
  auto sched = [](const std::string& line) {
    return std::string(kBase) + "\n[scheduler]\n" + line + "\n";
  };
  auto ok = [&](const std::string& line, uint64_t bytes) {
    auto r = dp::parse_policy(sched(line), "test.toml");
    ASSERT_TRUE(r.ok()) << line;
    EXPECT_EQ(r.policy->scheduler.flowcell, bytes) << line;
  };
  ok("flowcell = \"64KiB\"", 65536);
  ok("flowcell = 0", 0);
  ok("flowcell = 1048576", 1 << 20);
  expect_one_error(sched("flowcell = \"100KB\""), 35, "power of two");
  expect_one_error(sched("flowcell = \"1KiB\""), 35, "from 4KiB to 16MiB");
  expect_one_error(sched("flowcell = \"64 furlongs\""), 35, "unknown unit");
  expect_one_error(sched("flowcell = -1"), 35, "must be a size");
  expect_one_error(sched("peak_window = \"11s\""), 35, "at most");
  auto order = dp::parse_policy(sched("flowcell_order = \"any\""), "test.toml");
  ASSERT_TRUE(order.ok());
  EXPECT_TRUE(order.policy->scheduler.flowcell_any_order);
  expect_one_error(sched("flowcell_order = \"random\""), 35, "must be \"keep\" or \"any\"");
}

TEST(Policy, PlacementIsFlowletsCellsOrBursts) {
  auto sched = [](const std::string& lines) {
    return std::string(kBase) + "\n[scheduler]\n" + lines + "\n";
  };
  auto parse = [&](const std::string& lines) {
    auto r = dp::parse_policy(sched(lines), "test.toml");
    EXPECT_TRUE(r.ok()) << lines;
    return r.ok() ? r.policy->scheduler : dp::SchedulerSettings{};
  };
  auto base = dp::parse_policy(kBase, "test.toml");
  ASSERT_TRUE(base.ok());
  // the defaults are what dp-lab bench measured best (docs/benchmarks.md)
  const auto& d = base.policy->scheduler;
  EXPECT_TRUE(d.burst_placement) << "bursts by default";
  EXPECT_EQ(d.flowcell, 0u);
  EXPECT_EQ(d.flowlet_gap, dp::kDefaultBurstGap);
  EXPECT_EQ(d.peak_window, std::chrono::milliseconds(100));
  EXPECT_EQ(d.hold, std::chrono::seconds(1));
  auto sched_only = dp::parse_policy(sched("tick = \"50ms\""), "test.toml");
  ASSERT_TRUE(sched_only.ok());
  EXPECT_EQ(sched_only.policy->scheduler, d) << "with a [scheduler] that says nothing of them";
  // today's behaviour before the change, written out
  auto f = parse("placement = \"flowlets\"\npeak_window = \"0s\"\nhold = \"0s\"");
  EXPECT_FALSE(f.burst_placement);
  EXPECT_EQ(f.flowlet_gap, dp::kDefaultFlowletGap) << "flowlets keep their own gap";
  EXPECT_EQ(f.peak_window.count(), 0);
  EXPECT_EQ(f.hold.count(), 0);
  auto alone = parse("flowcell = \"64KiB\"");
  EXPECT_FALSE(alone.burst_placement) << "a flowcell alone means cells";
  EXPECT_EQ(alone.flowcell, 65536u);
  EXPECT_EQ(alone.flowlet_gap, dp::kDefaultFlowletGap);
  auto b = parse("placement = \"bursts\"");
  EXPECT_TRUE(b.burst_placement);
  EXPECT_EQ(b.flowcell, 0u);
  EXPECT_EQ(b.flowlet_gap, dp::kDefaultBurstGap) << "a burst ends at a longer gap";
  EXPECT_EQ(parse("placement = \"bursts\"\nflowlet_gap = \"1ms\"").flowlet_gap,
            std::chrono::milliseconds(1))
      << "unless the policy says";
  EXPECT_EQ(parse("flowlet_gap = \"1ms\"\nplacement = \"bursts\"").flowlet_gap,
            std::chrono::milliseconds(1))
      << "in whichever order";
  EXPECT_EQ(parse("placement = \"cells\"").flowcell, dp::kDefaultFlowcell);
  EXPECT_EQ(parse("placement = \"cells\"\nflowcell = \"64KiB\"").flowcell, 65536u);
  EXPECT_FALSE(parse("placement = \"flowlets\"").burst_placement);
  expect_one_error(sched("placement = \"packets\""), 35, "must be \"flowlets\", \"cells\"");
  expect_one_error(sched("flowcell = \"64KiB\"\nplacement = \"bursts\""), 36, "remove flowcell");
  expect_one_error(sched("flowcell = \"64KiB\"\nplacement = \"flowlets\""), 36,
                   "does not use flowcell");
}

TEST(Policy, MinimumRtoPerClass) {
  auto lab = dp::load_policy_file(std::string(DP_SOURCE_DIR) + "/policies/lab-a.toml");
  ASSERT_TRUE(lab.ok());
  for (auto& c : lab.policy->classes) {
    auto want = c.kind == dp::ClassKind::LatencySensitive ? dp::kDefaultLatencyRtoMin
                                                          : std::chrono::milliseconds(0);
    EXPECT_EQ(c.rto_min, want) << c.name;
    EXPECT_EQ(dp::encode_class_tcp(c).rto_min_us,
              static_cast<uint32_t>(std::chrono::microseconds(want).count()))
        << c.name;
  }
  auto with = [](const std::string& line) {
    return replace(kBase, "ports = [\"tcp:50000-50999\"]",
                   "ports = [\"tcp:50000-50999\"]\nrto_min = " + line);
  };
  auto r = dp::parse_policy(with("\"0s\""), "p.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.policy->classes[0].rto_min.count(), 0) << "0: the kernel's";
  r = dp::parse_policy(with("\"5ms\""), "p.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.policy->classes[0].rto_min, std::chrono::milliseconds(5));
  expect_one_error(with("\"1s\""), 26, "can only lower");
  expect_one_error(with("\"500us\""), 26, "at least 1ms");
}

TEST(Policy, MaximumRtoPerClassKeepsTheKernelsLifetimeThroughAnOutage) {
  auto with = [](const std::string& line) {
    return replace(kBase, "ports = [\"tcp:50000-50999\"]",
                   "ports = [\"tcp:50000-50999\"]\nrto_max = " + line);
  };
  auto r = dp::parse_policy(with("\"1s\""), "p.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.policy->classes[0].rto_max, std::chrono::seconds(1));
  auto t = dp::encode_class_tcp(r.policy->classes[0], 15);
  EXPECT_EQ(t.rto_max_ms, 1000u);
  // the kernel's own give-up time with tcp_retries2 = 15: 924.6 s
  EXPECT_EQ(t.user_timeout_ms, 924600u);
  EXPECT_EQ(dp::encode_class_tcp(r.policy->classes[0], 8).user_timeout_ms, 511u * 200);
  r = dp::parse_policy(with("\"0s\""), "p.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(dp::encode_class_tcp(r.policy->classes[0]).rto_max_ms, 0u) << "0: the kernel's";
  EXPECT_EQ(dp::encode_class_tcp(r.policy->classes[0]).user_timeout_ms, 0u) << "nothing to keep";
  expect_one_error(with("\"500ms\""), 26, "at least 1s");
  expect_one_error(with("\"5m\""), 26, "can only lower");
}

TEST(Policy, InterfaceNamesTheKernelRefusesAreRefused) {
  expect_one_error(replace(kBase, "\"eth0\"", "\"eth 0\""), 6, "whitespace");
  expect_one_error(replace(kBase, "\"eth0\"", "\"eth0:1\""), 6, "contains ':'");
  expect_one_error(replace(kBase, "\"eth0\"", "\"averyveryverylongname\""), 6,
                   "the kernel allows 15");
  expect_one_error(replace(kBase, "\"eth0\"", "\"..\""), 6, "the kernel refuses");
  // "eth1\u0000" would be a second path on eth1 to the kernel
  expect_one_error(replace(kBase, "\"eth0\"", "\"eth1\\u0000\""), 6, "NUL");
}

TEST(Policy, MetricsListenAddressesChecked) {
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:0", "999.1.1.1:9464", "[fd00::1:9464",
                          "[10.0.0.1]:9464", "host:9464", "127.0.0.1"})
    expect_one_error(std::string(kBase) + "\n[metrics]\nlisten = \"" + bad + "\"\n", 35,
                     "must be ADDRESS:PORT");
  for (const char* good : {"127.0.0.1:9464", "[::1]:9464", "localhost:1", ""}) {
    auto r =
        dp::parse_policy(std::string(kBase) + "\n[metrics]\nlisten = \"" + good + "\"\n", "p.toml");
    EXPECT_TRUE(r.ok()) << good << ": " << (r.errors.empty() ? "" : r.errors[0].str());
  }
}

TEST(Policy, EventsKeepIsReadAndItsRangeRefusedWithTheLine) {
  auto r = dp::parse_policy(std::string(kBase), "t.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.policy->events.keep, 1024);
  r = dp::parse_policy(std::string(kBase) + "\n[events]\nkeep = 20000\n", "t.toml");
  ASSERT_TRUE(r.ok()) << r.errors[0].str();
  EXPECT_EQ(r.policy->events.keep, 20000);
  expect_one_error(std::string(kBase) + "\n[events]\nkeep = 8\n", 35,
                   "\"keep\" = 8 in [events] is out of range (16 to 65536)");
  expect_one_error(std::string(kBase) + "\n[events]\nkept = 100\n", 35, "kept");
}

TEST(Policy, DefaultClassMustExist) {
  expect_one_error(replace(kBase, "name = \"n1\"", "name = \"n1\"\ndefault_class = \"bulk\""), 3,
                   "default_class \"bulk\"");
}

TEST(Policy, ReturnMarginIsBelowTheThreshold) {
  auto r = dp::parse_policy(std::string(kBase) + "\n[scheduler]\nreturn_margin = 0.25\n", "t.toml");
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r.policy->scheduler.return_margin, 0.25);
  expect_one_error(std::string(kBase) + "\n[scheduler]\nreturn_margin = 0.6\n", 35,
                   "return_margin 0.6 is not below load_threshold 0.6");
  expect_one_error(std::string(kBase) + "\n[scheduler]\nreturn_margin = 0\n", 35,
                   "\"return_margin\" = 0 in [scheduler] must be above 0 and at most 1");
}

TEST(Policy, DeadZoneAboveToleranceRefused) {
  expect_one_error(std::string(kBase) + "\n[scheduler]\ndead_zone = \"1ms\"\n", 35,
                   "larger than latency_tolerance");
}

TEST(Policy, ReportsEveryErrorSortedByLine) {
  auto text =
      replace(replace(kBase, "prefer = \"rail1\"", "prefer = \"x\""), "table = 100", "table = 0");
  auto r = dp::parse_policy(text, "p.toml");
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_LT(r.errors[0].line, r.errors[1].line);
}

TEST(Policy, MissingFileIsAnError) {
  auto r = dp::load_policy_file("/nonexistent/policy.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.errors[0].message.find("cannot read"), std::string::npos);
}

TEST(Policy, HashChangesWithContent) {
  auto a = dp::parse_policy(kBase, "p.toml");
  auto b = dp::parse_policy(replace(kBase, "\"50Gbit\"", "\"40Gbit\""), "p.toml");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a.policy->hash, b.policy->hash);
}

namespace {
int line_of(const std::string& text, const std::string& needle) {
  auto at = text.find(needle);
  return at == std::string::npos
             ? -1
             : 1 + static_cast<int>(
                       std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
}
}  // namespace

TEST(Policy, ClassQosTakesDscpNamesAndTcClassIds) {
  std::string text =
      replace(kBase, "priority = 6", "priority = 6\ndscp = \"ef\"\nskb_priority = \"1:10\"");
  text = replace(text, "mark = 0x54", "mark = 0x54\ndscp = 10");
  auto r = dp::parse_policy(text, "p.toml");
  ASSERT_TRUE(r.ok()) << r.errors[0].str();
  EXPECT_EQ(r.policy->classes[0].dscp, 46);
  EXPECT_EQ(r.policy->classes[0].skb_priority, 0x10010u);
  EXPECT_EQ(r.policy->classes[1].dscp, 10);
  EXPECT_FALSE(r.policy->classes[1].skb_priority.has_value());
  for (auto [name, value] : {std::pair{"CS1", 8}, {"AF41", 34}, {"af11", 10}, {"CS7", 56}}) {
    auto t = replace(kBase, "priority = 6", std::string("dscp = \"") + name + "\"");
    auto p = dp::parse_policy(t, "p.toml");
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(p.policy->classes[0].dscp, value) << name;
  }
}

TEST(Policy, BadDscpAndSkbPriorityAreRefusedWithTheirPosition) {
  for (const char* bad : {"dscp = 64", "dscp = \"AF51\"", "dscp = -1", "dscp = true"}) {
    auto t = replace(kBase, "priority = 6", bad);
    expect_one_error(t, line_of(t, bad), "dscp of class \"dispatch\" must be 0-63");
  }
  for (const char* bad :
       {"skb_priority = \"1:10:3\"", "skb_priority = \"x\"", "skb_priority = -5"}) {
    auto t = replace(kBase, "priority = 6", bad);
    expect_one_error(t, line_of(t, bad), "skb_priority of class \"dispatch\" must be");
  }
}

TEST(Policy, QosSectionGivesEveryClassItsAckQos) {
  std::string text = std::string(kBase) + "[qos]\nack_skb_priority = \"1:5\"\nack_dscp = \"CS6\"\n";
  auto r = dp::parse_policy(text, "p.toml");
  ASSERT_TRUE(r.ok()) << r.errors[0].str();
  EXPECT_EQ(r.policy->qos.ack_skb_priority, 0x10005u);
  EXPECT_EQ(r.policy->qos.ack_dscp, 48);
  for (const auto& c : r.policy->classes) {
    auto q = dp::encode_qos(c, r.policy->qos);
    EXPECT_EQ(q.flags & (DP_QOS_F_ACK_PRIORITY | DP_QOS_F_ACK_DSCP),
              DP_QOS_F_ACK_PRIORITY | DP_QOS_F_ACK_DSCP)
        << c.name;
    EXPECT_EQ(q.ack_priority, 0x10005u);
    EXPECT_EQ(q.ack_dscp, 48);
    EXPECT_EQ(q.flags & DP_QOS_F_PRIORITY, c.skb_priority ? DP_QOS_F_PRIORITY : 0) << c.name;
  }
  // without [qos], a class's ACKs are stamped as its data is
  auto plain = dp::parse_policy(kBase, "p.toml");
  ASSERT_TRUE(plain.ok());
  auto q = dp::encode_qos(plain.policy->classes[0], plain.policy->qos);
  EXPECT_EQ(q.flags & (DP_QOS_F_ACK_PRIORITY | DP_QOS_F_ACK_DSCP), 0);
  EXPECT_FALSE(r.policy->same_settings(*plain.policy)) << "a [qos] change is a change";
}

TEST(Policy, BadQosIsRefusedWithItsPosition) {
  const std::string base = std::string(kBase) + "[qos]\n";
  const int line = 1 + static_cast<int>(std::count(base.begin(), base.end(), '\n'));
  expect_one_error(base + "ack_skb_priority = 9\n", line,
                   "ack_skb_priority = 9 of [qos] is out of range: a number is a priority band");
  expect_one_error(base + "ack_skb_priority = \"1:5:1\"\n", line,
                   "ack_skb_priority of [qos] must be a number or a tc class id");
  expect_one_error(base + "ack_dscp = \"AF51\"\n", line, "ack_dscp of [qos] must be 0-63");
  expect_one_error(base + "ack_skb_priorty = \"1:5\"\n", line,
                   "unknown key \"ack_skb_priorty\" in [qos]; did you mean \"ack_skb_priority\"?");
  expect_one_error("qos = 1\n" + std::string(kBase), 1, "qos must be a [qos] section");
}

namespace {

// kBase with routes on both rails (rail1 gets an IPv4 gateway too).
std::string with_routes(const std::string& r0, const std::string& r1,
                        const std::string& topology = "") {
  std::string s = replace(kBase, "name = \"n1\"\n", "name = \"n1\"\n" + topology);
  s = replace(s, "fwmark = 0x100\n", "fwmark = 0x100\nroutes = " + r0 + "\n");
  s = replace(s, "gateway6 = \"fd00::1\"\n", "gateway6 = \"fd00::1\"\ngateway = \"10.1.0.1\"\n");
  return replace(s, "fwmark = 0x101\n", "fwmark = 0x101\nroutes = " + r1 + "\n");
}

}  // namespace

TEST(Policy, TopologyIsSharedOrSeparate) {
  auto p = dp::parse_policy(with_routes(R"(["10.9.0.0/16"])", R"(["10.9.0.0/16"])"), "p.toml");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.policy->topology, dp::Topology::Shared) << "the default";
  expect_one_error(replace(kBase, "name = \"n1\"\n", "name = \"n1\"\ntopology = \"meshed\"\n"), 3,
                   "must be \"shared\"");
}

TEST(Policy, SharedTopologyRefusesARailThatDoesNotRouteWhatTheOtherRoutes) {
  // a redirect onto rail1 toward 10.8.0.0/16 would blackhole
  expect_one_error(with_routes(R"(["10.9.0.0/16", "10.8.0.0/16"])", R"(["10.9.0.0/16"])"), 21,
                   "path rail1 does not route 10.8.0.0/16, which path rail0 routes");
  // a wider route covers a narrower one
  EXPECT_TRUE(dp::parse_policy(
                  with_routes(R"(["10.9.0.0/16", "10.9.1.0/24"])", R"(["10.9.0.0/16"])"), "p.toml")
                  .ok());
}

TEST(Policy, SeparateTopologyTakesEachRailsRoutesAsItsNetworks) {
  // (rail0's IPv6 route needs its IPv6 next hop)
  auto p = dp::parse_policy(
      replace(with_routes(R"(["10.10.0.0/16", "fd10::/32"])", R"(["10.20.0.0/16"])",
                          "topology = \"separate\"\n"),
              "gateway = \"10.0.0.1\"\n", "gateway = \"10.0.0.1\"\ngateway6 = \"fd10::1\"\n"),
      "p.toml");
  ASSERT_TRUE(p.ok()) << p.errors[0].str();
  EXPECT_EQ(p.policy->topology, dp::Topology::Separate);
  EXPECT_EQ(p.policy->paths[0].network()->str(), "10.10.0.0/16");
  EXPECT_EQ(p.policy->paths[0].network6()->str(), "fd10::/32");
  EXPECT_FALSE(p.policy->paths[1].network6());
  const std::string sep = "topology = \"separate\"\n";
  expect_one_error(with_routes(R"(["10.10.0.0/16"])", R"(["10.10.4.0/24"])", sep), 22,
                   "10.10.4.0/24 of path rail1 overlaps 10.10.0.0/16 of path rail0");
  expect_one_error(with_routes(R"(["10.10.0.0/16"])", R"(["default"])", sep), 22,
                   "cannot be a default route");
  expect_one_error(with_routes(R"(["10.10.0.0/16"])", R"([])", sep), 22,
                   "path rail1 has no routes");
}

TEST(Policy, ClassifyFollowsTheDatapathsOrder) {
  auto p = dp::parse_policy(kBase, "p.toml");
  ASSERT_TRUE(p.ok());
  const auto& pol = *p.policy;
  using dp::Proto;
  EXPECT_EQ(pol.classify(Proto::Tcp, 40000, 50001, 0), pol.class_index("dispatch"));
  EXPECT_EQ(pol.classify(Proto::Tcp, 50001, 40000, 0), pol.class_index("dispatch"))
      << "source port";
  EXPECT_EQ(pol.classify(Proto::Tcp, 40000, 50001, 0x54), pol.class_index("logs")) << "mark first";
  EXPECT_EQ(pol.classify(Proto::Udp, 40000, 50001, 0), -1) << "dispatch is TCP only";
  EXPECT_EQ(pol.classify(Proto::Udp, 40000, 514, 0), pol.class_index("logs"));
  EXPECT_EQ(pol.classify(Proto::Tcp, 40000, 40001, 0), -1);
  EXPECT_EQ(pol.classify(Proto::Tcp, 40000, 50001, 0x101), -1)
      << "a path's fwmark asked for that path: never classified (steered)";
}

TEST(Policy, MarkBitsAreAMaskWithTheRedirectBitInsideAndEveryMarkInIt) {
  auto p = dp::parse_policy(kBase, "p.toml");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.policy->routing.mark_mask, 0xffffffffu);
  EXPECT_EQ(p.policy->routing.redirect_mark, static_cast<uint32_t>(DP_MARK_REDIRECTED));
  std::string calico = replace(kBase, "[node]\nname = \"n1\"\n",
                               "[node]\nname = \"n1\"\n[routing]\nmark_mask = 0xffff\n"
                               "redirect_mark = 0x8000\n");
  auto q = dp::parse_policy(calico, "p.toml");
  ASSERT_TRUE(q.ok()) << q.errors.front().str();
  EXPECT_EQ(q.policy->routing.mark_mask, 0xffffu);
  EXPECT_EQ(q.policy->classify(dp::Proto::Tcp, 40000, 40001, 0xabc00054),
            q.policy->class_index("logs"))
      << "bits outside the mask are others'";
  auto routing = [&](const std::string& keys) {
    return replace(kBase, "[node]\nname = \"n1\"\n", "[node]\nname = \"n1\"\n[routing]\n" + keys);
  };
  expect_one_error(routing("redirect_mark = 0x3000\n"), 4, "must be a single bit");
  expect_one_error(routing("mark_mask = 0xffff\n"), 4,
                   "redirect_mark 0x40000000 in [routing] is outside");
  expect_one_error(routing("mark_mask = 0x1fe\nredirect_mark = 0x80\n"), 21,
                   "fwmark 0x101 of path \"rail1\" has bits outside [routing] mark_mask 0x1fe");
  expect_one_error(routing("redirect_mark = 0x1\n"), 20, "uses bit 0x1,");
  expect_one_error(replace(routing("mark_mask = 0xffff\nredirect_mark = 0x8000\n"), "mark = 0x54",
                           "mark = 0x10054"),
                   34, "mark 0x10054 of class \"logs\" has bits outside");
}

TEST(Policy, ResponderKeysHaveDefaultsAndRanges) {
  auto p = dp::parse_policy(kBase, "p.toml");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p.policy->responder.enable);
  EXPECT_EQ(p.policy->responder.port, 7862);
  EXPECT_EQ(p.policy->responder.max_sessions, 4);
  EXPECT_EQ(p.policy->responder.max_duration, std::chrono::seconds(10));
  // by default it answers what the paths reach: gateways here
  auto allowed = p.policy->responder_allowed();
  auto ok = [&](const char* a) {
    auto ip = *dp::IpAddr::parse(a);
    return std::any_of(allowed.begin(), allowed.end(), [&](auto& pf) { return pf.contains(ip); });
  };
  EXPECT_TRUE(ok("10.0.0.1"));
  EXPECT_TRUE(ok("fd00::1"));
  EXPECT_FALSE(ok("192.0.2.7"));

  std::string with = std::string(kBase) +
                     "\n[responder]\nport = 9000\nmax_sessions = 2\nmax_duration = \"3s\"\n"
                     "allow = [\"192.0.2.0/24\"]\n";
  auto q = dp::parse_policy(with, "p.toml");
  ASSERT_TRUE(q.ok()) << q.errors.front().str();
  EXPECT_EQ(q.policy->responder.port, 9000);
  EXPECT_EQ(q.policy->responder.max_sessions, 2);
  ASSERT_EQ(q.policy->responder_allowed().size(), 1u);
  EXPECT_TRUE(q.policy->responder_allowed()[0].contains(*dp::IpAddr::parse("192.0.2.7")));
  EXPECT_FALSE(q.policy->responder_allowed()[0].contains(*dp::IpAddr::parse("192.0.3.7")));
}

TEST(Policy, ResponderMistakesAreRefusedWithTheirLine) {
  auto base = std::string(kBase) + "\n[responder]\n";
  expect_one_error(base + "port = 70000\n", 35, "out of range");
  expect_one_error(base + "max_sessions = 0\n", 35, "out of range");
  expect_one_error(base + "max_duration = \"2m\"\n", 35, "at most");
  expect_one_error(base + "allow = [\"10.0.0.0/33\"]\n", 35, "takes prefixes");
  expect_one_error(base + "enable = 1\n", 35, "true or false");
  expect_one_error(base + "listen = 1\n", 35, "unknown key \"listen\"");
  // one port per rail: 65535 and 65536
  expect_one_error(base + "port = 65535\n", 35, "beyond 65535");
  // the responder's ports may not be class ports (a probe would be steered)
  expect_one_error(base + "port = 50998\n", 35, "overlap tcp:50000-50999 of class \"dispatch\"");
  EXPECT_TRUE(dp::parse_policy(base + "port = 50998\nenable = false\n", "p.toml").ok());
}

// Issue 13: two classes each listing "tcp:1" 4,000 times made 16 million
// overlap messages (20 s and 3.4 GB in dpctl policy check).
TEST(Policy, OverlapDiagnosticsAreCapped) {
  std::string ports;
  for (int i = 0; i < 4000; ++i) ports += std::string(i ? ", " : "") + "\"tcp:1\"";
  std::string text = replace(kBase, R"(ports = ["tcp:50000-50999"])", "ports = [" + ports + "]");
  text = replace(text, R"(ports = ["tcp:54000-54099", "udp:514"])", "ports = [" + ports + "]");
  auto r = dp::parse_policy(text, "p.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_LE(r.errors.size(), 21u);
  EXPECT_NE(r.errors[0].message.find("overlaps tcp:1 of class \"dispatch\""), std::string::npos)
      << r.errors[0].str();
  EXPECT_NE(r.errors.back().message.find("more overlapping port ranges"), std::string::npos);
}

TEST(Policy, OverlapIsFoundBehindARangeOfTheSameClass) {
  // dispatch 50000-50999 reaches furthest and overlaps logs' 50050-50060;
  // dispatch's own 50055 must still be found to overlap logs' range
  std::string text = replace(kBase, R"(ports = ["tcp:50000-50999"])",
                             R"(ports = ["tcp:50000-50999", "tcp:50055"])");
  text =
      replace(text, R"(ports = ["tcp:54000-54099", "udp:514"])", R"(ports = ["tcp:50050-50060"])");
  auto r = dp::parse_policy(text, "p.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 2u);
  int found = 0;
  for (auto& e : r.errors) found += e.message.find("tcp:50055") != std::string::npos;
  EXPECT_EQ(found, 1) << "the range behind the furthest-reaching one of its own class";
}

TEST(Policy, DscpIsRangeCheckedBeforeItIsNarrowed) {
  // 4294967342 = 2^32 + 46: once taken for EF (46)
  expect_one_error(replace(kBase, "priority = 6\n", "priority = 6\ndscp = 4294967342\n"), 24,
                   "dscp of class \"dispatch\" must be 0-63");
}

TEST(Policy, ClassPortsInTheEphemeralRangeAreWarnedAbout) {
  auto r = dp::parse_policy(kBase, "p.toml");
  ASSERT_TRUE(r.ok());
  // logs: tcp:54000-54099 and udp:514; dispatch: tcp:50000-50999
  auto e = dp::parse_ephemeral_ports("32768\t60999", "50000-50999,54000-54049");
  auto w = dp::ephemeral_port_warnings(*r.policy, e);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("p.toml:32: warning: class logs: 50 of its ports tcp:54000-54099"),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[0].find("add 54050-54099 to net.ipv4.ip_local_reserved_ports"), std::string::npos)
      << w[0];
  // all reserved, or a range below the classes': nothing to say
  EXPECT_TRUE(dp::ephemeral_port_warnings(
                  *r.policy, dp::parse_ephemeral_ports("32768 60999", "50000-50999,54000-54099"))
                  .empty());
  EXPECT_TRUE(
      dp::ephemeral_port_warnings(*r.policy, dp::parse_ephemeral_ports("1024 4999", "")).empty());
  EXPECT_TRUE(
      dp::ephemeral_port_warnings(*r.policy, dp::parse_ephemeral_ports("garbage", "")).empty());
}

// What `policy check` used to pass although the policy does the wrong thing,
// and the hints a near name gets (each exactly one error, at its line).
std::string both_route(const std::string& route) {
  std::string text =
      replace(kBase, "fwmark = 0x100\n", "fwmark = 0x100\nroutes = [\"" + route + "\"]\n");
  return replace(text, "fwmark = 0x101\n", "fwmark = 0x101\nroutes = [\"" + route + "\"]\n");
}

TEST(Policy, ARouteOfAFamilyWithoutThatFamilysGatewayIsRefused) {
  // rail0 has an IPv4 gateway only: its IPv6 route would be installed on-link
  expect_one_error(both_route("fd99::2/128"), 11, "is IPv6, but the path has no gateway6");
  // and rail1 an IPv6 one only
  expect_one_error(both_route("10.9.0.0/16"), 20, "is IPv4, but the path has no gateway");
}

TEST(Policy, ASharedTopologyRailWithoutRoutesIsRefused) {
  std::string text =
      replace(kBase, "fwmark = 0x100\n", "fwmark = 0x100\nroutes = [\"10.9.0.0/16\"]\n");
  expect_one_error(text, 13, "path rail1 has no routes: in the shared topology");
}

TEST(Policy, ACgroupGivenAsAFilesystemPathIsRefusedWithTheFormThatWorks) {
  expect_one_error(replace(kBase, "ports = [\"tcp:50000-50999\"]\n",
                           "cgroups = [\"/sys/fs/cgroup/system.slice/x.service\"]\n"),
                   25, "write \"/system.slice/x.service\", or units = [\"x.service\"]");
}

TEST(Policy, SkbPriorityAsANumberIsABandOf0To7) {
  expect_one_error(replace(kBase, "priority = 6\n", "priority = 6\nskb_priority = 4294967295\n"),
                   24, "a number is a priority band, 0-7; a tc class is written as a string");
  EXPECT_TRUE(dp::parse_policy(replace(kBase, "priority = 6\n", "priority = 6\nskb_priority = 7\n"),
                               "p.toml")
                  .ok());
}

TEST(Policy, AMisspeltSectionGetsTheNearestNameAndNoSecondError) {
  expect_one_error(replace(kBase, "[node]\n", "[Node]\n"), 1, "did you mean [node]?");
  std::string classes = kBase;
  for (size_t at; (at = classes.find("[[class]]")) != std::string::npos;)
    classes.replace(at, 9, "[[classes]]");
  expect_one_error(classes, 20, "did you mean [[class]]?");
  expect_one_error(replace(kBase, "priority = 6\n", "priority = 6\nprefered = \"rail0\"\n"), 24,
                   "unknown key \"prefered\" in [[class]]; did you mean \"prefer\"?");
}

TEST(Policy, AnUnknownPreferredPathListsThePathsAndTheNearest) {
  expect_one_error(replace(kBase, "prefer = \"rail0\"", "prefer = \"RoCE\""), 24,
                   "prefers path \"RoCE\", which the policy does not define (paths: rail0, rail1)");
  expect_one_error(replace(kBase, "prefer = \"rail0\"", "prefer = \"rial0\""), 24,
                   "did you mean \"rail0\"? (paths: rail0, rail1)");
}

TEST(Policy, ADurationWithoutItsUnitShowsTheExpectedForm) {
  expect_one_error(replace(kBase, "[[path]]\nname = \"rail0\"",
                           "[health]\nholddown = 300\n\n[[path]]\nname = \"rail0\""),
                   5,
                   "must be a duration string with its unit, such as \"500ms\", \"30s\" or \"5m\" "
                   "(not the bare number 300)");
}

// multipath = true in the shared topology (tests/unit/test_multipath.cpp has
// the separate topology's cases): a class matched by unit is accepted, one
// matched by port alone is refused where the key is.
TEST(Policy, AReserveIsARateOrAShareAndTheReservesLeaveRoomOnEveryRail) {
  auto r =
      dp::parse_policy(replace(kBase, "mark = 0x54", "mark = 0x54\nreserve = \"10%\""), "p.toml");
  ASSERT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].str());
  EXPECT_DOUBLE_EQ(r.policy->classes[1].reserve_share, 0.10);
  EXPECT_EQ(r.policy->classes[1].reserve_on(50'000'000'000), 5'000'000'000u);
  EXPECT_EQ(r.policy->classes[0].reserve_on(50'000'000'000), 0u) << "no reserve by default";
  r = dp::parse_policy(replace(kBase, "mark = 0x54", "mark = 0x54\nreserve = \"2Gbit\""), "p.toml");
  ASSERT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].str());
  EXPECT_EQ(r.policy->classes[1].reserve_on(200'000'000'000), 2'000'000'000u);

  expect_one_error(replace(kBase, "mark = 0x54", "mark = 0x54\nreserve = \"100%\""), 32,
                   "a share must be above 0% and below 100%");
  expect_one_error(replace(kBase, "mark = 0x54", "mark = 0x54\nreserve = \"fast\""), 32,
                   "reserve of class \"logs\"");
  expect_one_error(replace(kBase, "mark = 0x54", "mark = 0x54\nreserve = \"0bit\""), 32,
                   "out of range");
  // 30 + 25 Gbit on rail1's 50: refused at the reserve that passes it
  expect_one_error(replace(replace(kBase, "priority = 6", "priority = 6\nreserve = \"30Gbit\""),
                           "mark = 0x54", "mark = 0x54\nreserve = \"25Gbit\""),
                   33,
                   "the reserves of dispatch, logs add up to 55 Gbit/s on path \"rail1\", whose "
                   "capacity is 50 Gbit/s");
}

TEST(Policy, MultipathInTheSharedTopologyNeedsACgroupOrUnit) {
  auto r = dp::parse_policy(replace(kBase, "ports = [\"tcp:50000-50999\"]",
                                    "ports = [\"tcp:50000-50999\"]\nunits = [\"trainer.service\"]\n"
                                    "multipath = true"),
                            "p.toml");
  ASSERT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].str());
  EXPECT_EQ(r.policy->topology, dp::Topology::Shared);
  EXPECT_TRUE(r.policy->has_multipath());
  expect_one_error(replace(kBase, "ports = [\"tcp:50000-50999\"]",
                           "ports = [\"tcp:50000-50999\"]\nmultipath = true"),
                   26,
                   "multipath in class \"dispatch\" needs MPTCP sockets, which are made when "
                   "they are created, before a port or a mark is known: match the class by "
                   "cgroups or units, or give the policy a multipath class that does (its "
                   "processes' connections to this class are then MPTCP)");
}

// [nccl]: NCCL's traffic classes and operations mapped to classes (dualpath-nccl(7)).
TEST(Policy, NcclMapsTrafficClassesAndOperations) {
  auto r =
      dp::parse_policy(std::string(kBase) +
                           "\n[nccl]\ntraffic_class.3 = \"logs\"\n"
                           "operation.alltoall = \"logs\"\noperation.allreduce = \"dispatch\"\n",
                       "p.toml");
  ASSERT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].str());
  EXPECT_EQ(r.policy->nccl.traffic_class.at(3), "logs");
  EXPECT_EQ(r.policy->nccl.operation.at("alltoall"), "logs");
  EXPECT_EQ(r.policy->nccl.operation.at("allreduce"), "dispatch");
  // a policy that differs only there is a different policy
  auto base = dp::parse_policy(kBase, "p.toml");
  EXPECT_FALSE(r.policy->same_settings(*base.policy));
}

TEST(Policy, NcclUnknownClassIsRefused) {
  expect_one_error(
      std::string(kBase) + "\n[nccl]\noperation.alltoall = \"expert\"\n", 35,
      "operation.alltoall = \"expert\" is not a class of this policy (classes: dispatch, logs)");
}

TEST(Policy, NcclUnknownOperationIsRefused) {
  expect_one_error(std::string(kBase) + "\n[nccl]\noperation.alltoal = \"logs\"\n", 35,
                   "operation.alltoal is not an NCCL operation; did you mean \"alltoall\"?");
}

TEST(Policy, NcclTrafficClassMustBeANumber) {
  expect_one_error(std::string(kBase) + "\n[nccl]\ntraffic_class.high = \"logs\"\n", 35,
                   "the key must be an NCCL traffic class, a whole number from 0 to 255");
  expect_one_error(std::string(kBase) + "\n[nccl]\ntraffic_class.256 = \"logs\"\n", 35,
                   "traffic_class.256");
}

TEST(Policy, NcclUnknownKeyIsRefused) {
  expect_one_error(std::string(kBase) + "\n[nccl]\noperations.alltoall = \"logs\"\n", 35,
                   "unknown key \"operations\" in [nccl]; did you mean \"operation\"?");
}

namespace {
// kBase with a [health] section of `body` appended; `line` is the number of
// the section's first key
std::string with_health(const std::string& body, int* line) {
  std::string t = std::string(kBase) + "\n[health]\n";
  *line = static_cast<int>(std::count(t.begin(), t.end(), '\n')) + 1;
  return t + body;
}
}  // namespace

TEST(Policy, BfdAuthenticationNeedsAKeyFileAndAKeyFileNeedsIt) {
  int line = 0;
  std::string t = with_health("bfd_auth = \"meticulous-keyed-sha1\"\n", &line);
  expect_one_error(t, line, "bfd_auth in [health] needs bfd_auth_key_file");
  t = with_health("bfd_auth_key_file = \"/etc/dualpath/bfd.key\"\n", &line);
  expect_one_error(t, line, "used only with bfd_auth");
  t = with_health("bfd_auth = \"keyed-sha1\"\nbfd_auth_key_file = \"bfd.key\"\n", &line);
  expect_one_error(t, line + 1, "must be an absolute path");
  t = with_health("bfd_auth = \"keyed-md5\"\n", &line);
  expect_one_error(t, line, "keyed-sha1");
  t = with_health(
      "bfd_auth = \"meticulous-keyed-sha1\"\nbfd_auth_key_id = 9\n"
      "bfd_auth_key_file = \"/etc/dualpath/bfd.key\"\n",
      &line);
  auto r = dp::parse_policy(t, "p.toml");
  ASSERT_TRUE(r.ok()) << r.errors[0].str();
  EXPECT_EQ(r.policy->health.bfd_auth, 5);
  EXPECT_EQ(r.policy->health.bfd_auth_key_id, 9);
  EXPECT_EQ(r.policy->health.bfd_auth_key_file, "/etc/dualpath/bfd.key");
}
