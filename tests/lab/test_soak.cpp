// SPDX-License-Identifier: Apache-2.0
// The soak: traffic in every class, a multipath class's MPTCP streams among
// it, under the node's defaults (the adaptive scheduler, burst placement,
// BFD), while rails flap, a daemon is killed and restarted or upgraded
// across map layouts and back, policies are reloaded and a rail is
// blackholed: one fault a round, in a random order and
// at a random moment, for DP_SOAK_SECONDS (default 90; CI). Run it longer as
// a benchmark (docs/benchmarks.md, "The soak"):
//   DP_SOAK_SECONDS=600 build/tests/dp_lab_soak_tests
// It ends with a table per class: connections, broken ones, bytes sent,
// received and lost, and the longest stall (a fault's outage included). The
// UDP stream's row counts datagrams' bytes; a round whose UDP stream did not
// flow again by its end counts as broken, and its losses are what the
// faults' detection cost.
// Invariants, checked every round and at the end:
//  - every TCP byte of every class arrives intact, no connection breaks, and
//    neither daemon resets one (the shared topology moves them);
//  - nothing leaks: the rules, dualpath's routes, the tc filters and the pins
//    of both nodes are what they were before the first round, and the BPF
//    programs and maps loaded in the kernel are as many as before;
//  - node b's daemon (reloaded and flapped, never restarted) keeps its open
//    descriptors and its resident memory flat.
// A lab of its own, with a short hold-down (3 s) and ramp (500 ms steps).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "dualpath/abi.h"
#include "lab_fixture.h"

namespace fs = std::filesystem;
using namespace lab;
using namespace std::chrono_literals;

namespace {

std::string sorted_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (auto& l : lines) out += l + "\n";
  return out;
}

// What dualpath made on a node, as text that is equal when nothing leaked.
// Program ids change with every restart, so filters are counted by name.
std::string footprint(const std::string& ns) {
  std::string out;
  out += "rules:\n" + sorted_lines(must(nsenter(ns) + "ip rule show"));
  out += "rules6:\n" + sorted_lines(must(nsenter(ns) + "ip -6 rule show"));
  out += "routes:\n" + sorted_lines(must(nsenter(ns) + "ip route show table all proto 200"));
  out += "routes6:\n" + sorted_lines(must(nsenter(ns) + "ip -6 route show table all proto 200"));
  for (const char* dev : {"rail0", "rail1"})
    for (const char* dir : {"ingress", "egress"}) {
      std::string f = must(nsenter(ns) + "tc filter show dev " + dev + " " + dir);
      std::regex name(R"(name (\S+))");
      std::string names;
      for (auto it = std::sregex_iterator(f.begin(), f.end(), name); it != std::sregex_iterator();
           ++it)
        names += (*it)[1].str() + " ";
      out += std::string("tc ") + dev + " " + dir + ": " + names + "\n";
    }
  out += "pins:";
  std::vector<std::string> pins;
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/sys/fs/bpf/dualpath/" + ns, ec))
    pins.push_back(e.path().filename().string());
  std::sort(pins.begin(), pins.end());
  for (auto& p : pins) out += " " + p;
  return out + "\n";
}

// BPF programs and maps named dp_* in the kernel (both nodes').
std::pair<size_t, size_t> bpf_objects() {
  auto count = [](const std::string& what) {
    json all = json::parse(must("bpftool -j " + what + " show"), nullptr, false);
    size_t n = 0;
    if (all.is_array())
      for (auto& o : all) n += o.value("name", std::string()).rfind("dp_", 0) == 0;
    return n;
  };
  return {count("prog"), count("map")};
}

long status_kib(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::atol(line.c_str() + key.size() + 1);
  return -1;
}

// A process's descriptors by what they are ("socket", "anon_inode:bpf-map",
// a file's path).
std::map<std::string, size_t> fd_kinds(pid_t pid) {
  std::map<std::string, size_t> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string target = fs::read_symlink(it->path(), ec).string();
    if (ec) continue;  // closed since it was listed
    if (target.rfind("socket:", 0) == 0) target = "socket";
    ++out[target];
  }
  return out;
}

size_t total(const std::map<std::string, size_t>& kinds) {
  size_t n = 0;
  for (auto& [k, v] : kinds) n += v;
  return n;
}

// The daemon's descriptors once the transient ones are closed: the fewest
// over a second (the control connection of the dpctl call just made, a
// netlink request in flight), so that only one that stays counts as a leak;
// no more than `enough` ends the wait.
std::map<std::string, size_t> settled_fds(pid_t pid, size_t enough) {
  auto best = fd_kinds(pid);
  for (int i = 0; i < 10 && total(best) > enough; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto now = fd_kinds(pid);
    if (total(now) < total(best)) best = now;
  }
  return best;
}

std::string fd_diff(const std::map<std::string, size_t>& before,
                    const std::map<std::string, size_t>& after) {
  std::string out;
  for (auto& [k, n] : after) {
    auto it = before.find(k);
    size_t was = it == before.end() ? 0 : it->second;
    if (n > was) out += " +" + std::to_string(n - was) + " " + k;
  }
  return out;
}

constexpr const char* kCollective = "/dpl-soak-collective";

// What one class carried over the whole soak, and its worst moment.
struct ClassTotals {
  uint64_t connections = 0, broken = 0;  // broken: ended with an error
  uint64_t sent = 0, received = 0;
  uint64_t longest_stall_us = 0;  // the receiver's longest wait for data
};

// TCP in every class, a to b, checksummed: expert-dispatch, expert-combine,
// param-sync and logs streams, an MPTCP stream of the multipath class
// (collective, by its cgroup), and control request/response; and a UDP
// stream of expert-dispatch, which loses what is sent into a fault until it
// is detected but must flow again by the round's end.
struct Traffic {
  struct Stream {
    std::string klass;
    std::unique_ptr<Transfer> transfer;
  };
  std::vector<Stream> streams;
  std::thread rpc;
  std::vector<double> rtts;
  int rpc_count;
  std::thread udp_thread;
  UdpStreamResult udp;
  static constexpr int kUdpSize = 200;
  uint64_t bytes = 0;
  explicit Traffic(std::chrono::seconds len, uint16_t round) {
    const double secs = static_cast<double>(len.count());
    struct C {
      const char* klass;
      uint16_t port;
      double rate;
      bool multipath = false;
    };
    uint16_t off = static_cast<uint16_t>(round % 50);
    for (C c : {C{"expert-dispatch", 50400, 20e6}, C{"expert-combine", 51400, 20e6},
                C{"param-sync", 52400, 10e6}, C{"logs", 54010, 5e6},
                C{"collective", 45400, 10e6, true}}) {
      TransferSpec spec{"dpl-a",
                        "dpl-b",
                        "10.99.0.2",
                        static_cast<uint16_t>(c.port + off),
                        0,
                        0,
                        static_cast<uint64_t>(c.rate * secs / 8),
                        c.rate};
      if (c.multipath) {
        spec.cgroup = kCollective;
        spec.mptcp = true;
      }
      bytes += spec.bytes;
      streams.push_back({c.klass, std::make_unique<Transfer>(spec)});
    }
    rpc_count = static_cast<int>(secs * 300);
    rpc = std::thread([this, off] {
      rtts = ping_pong("dpl-a", "dpl-b", "10.99.0.2", static_cast<uint16_t>(53040 + off), rpc_count,
                       256, 3000);
    });
    udp_thread = std::thread([this, off, secs] {
      udp = udp_stream("dpl-a", "dpl-b", "10.99.0.2", static_cast<uint16_t>(50900 + off), secs,
                       1000, kUdpSize);
    });
  }
  // false (with the reason added to the test's failures) when anything
  // broke; each class's figures are added to `totals`
  bool intact(const std::string& during, std::map<std::string, ClassTotals>& totals) {
    bool ok = true;
    for (auto& [klass, t] : streams) {
      auto r = t->wait();
      EXPECT_TRUE(r.ok()) << during << ": " << klass << ": \"" << r.error << "\", sent " << r.sent
                          << " received " << r.received;
      if (klass == "collective") {
        EXPECT_TRUE(r.client_mptcp && r.server_mptcp)
            << during << ": the multipath class's connection fell back to TCP";
      }
      ClassTotals& c = totals[klass];
      ++c.connections;
      c.broken += !r.error.empty();
      c.sent += r.sent;
      c.received += r.received;
      c.longest_stall_us = std::max(c.longest_stall_us, r.max_gap_us);
      ok = ok && r.ok();
    }
    rpc.join();
    EXPECT_EQ(static_cast<int>(rtts.size()), rpc_count) << during << ": the control stream broke";
    ClassTotals& c = totals["control"];
    ++c.connections;
    c.broken += static_cast<int>(rtts.size()) != rpc_count;
    c.sent += static_cast<uint64_t>(rpc_count) * 256;
    c.received += rtts.size() * 256;
    for (double rtt_us : rtts)  // a request's round trip is the wait for its answer
      c.longest_stall_us = std::max(c.longest_stall_us, static_cast<uint64_t>(rtt_us));
    udp_thread.join();
    const bool flows = udp.error.empty() && udp.tail_received * 100 >= udp.tail_sent * 95;
    EXPECT_TRUE(flows) << during << ": the UDP stream's last fifth: " << udp.tail_received << " of "
                       << udp.tail_sent << " datagrams arrived " << udp.error;
    ClassTotals& u = totals["udp (dispatch)"];
    ++u.connections;
    u.broken += !flows;
    u.sent += udp.sent * kUdpSize;
    u.received += udp.received * kUdpSize;
    u.longest_stall_us = std::max(u.longest_stall_us, udp.max_gap_us);
    return ok && static_cast<int>(rtts.size()) == rpc_count && flows;
  }
  ~Traffic() {
    if (rpc.joinable()) rpc.join();
    if (udp_thread.joinable()) udp_thread.join();
  }
};

class Soak : public Fixture {};

TEST_F(Soak, TrafficSurvivesFlapsRestartsAndReloadsAndNothingLeaks) {
  const char* env = std::getenv("DP_SOAK_SECONDS");
  const auto duration = std::chrono::seconds(env ? std::atoi(env) : 90);
  ASSERT_TRUE(wait_all_up(30s));
  const std::string base_a = footprint("dpl-a"), base_b = footprint("dpl-b");
  const auto base_objects = bpf_objects();
  const pid_t b = daemon_pid("dpl-b");
  ASSERT_GT(b, 0);

  struct Action {
    const char* what;
    std::function<void()> run;
  };
  auto flap = [](const char* rail) {
    must(nsenter("dpl-b") + "ip link set " + rail + " down");
    std::this_thread::sleep_for(1s);
    must(nsenter("dpl-b") + "ip link set " + rail + " up");
    restore_lab_routes("dpl-b");
    restore_lab_routes("dpl-a");
  };
  auto restart_a = [](int sig) {
    pid_t a = daemon_pid("dpl-a");
    ASSERT_GT(a, 0);
    ASSERT_EQ(::kill(a, sig), 0);
    wait_gone(a);
    must(dp_lab() + " start a");
  };
  // An upgrade across map layouts (test_lab.cpp's upgrade test): a's daemon
  // is replaced by dualpathd-layout-test, a build with another map layout
  // that takes over this build's pins, and that in turn by this build, each
  // stopped with SIGTERM (its datapath steering on meanwhile).
  const std::string other = std::string(DP_BUILD_DIR) + "/daemon/dualpathd-layout-test";
  auto upgrade_a = [&] {
    for (const std::string& bin : {other, std::string()}) {
      pid_t a = daemon_pid("dpl-a");
      ASSERT_GT(a, 0);
      ASSERT_EQ(::kill(a, SIGTERM), 0);
      wait_gone(a);
      must((bin.empty() ? std::string() : "DP_LAB_DUALPATHD=" + bin + " ") + dp_lab() + " start a");
      json st = dpctl("a", "status");
      EXPECT_EQ(st.is_object() ? st["layout"]["version"] : json(),
                bin.empty() ? DP_LAYOUT_VERSION : 0x8001u)
          << "the daemon that runs after the " << (bin.empty() ? "upgrade" : "downgrade");
      if (!bin.empty()) std::this_thread::sleep_for(1s);
    }
  };
  std::vector<Action> actions = {
      {"rail0 flaps", [&] { flap("rail0"); }},
      {"node a's daemon is killed (SIGKILL) and restarted", [&] { restart_a(SIGKILL); }},
      {"both policies are reloaded",
       [] {
         for (const char* n : {"a", "b"}) must(dp_lab() + " dpctl " + n + " policy reload");
       }},
      {"rail1 flaps", [&] { flap("rail1"); }},
      {"node a's daemon is stopped (SIGTERM) and restarted", [&] { restart_a(SIGTERM); }},
      {"rail0 is blackholed both ways for 2 s",
       [] {
         attach_drop("dpl-b", "rail0", 100000);
         attach_drop("dpl-a", "rail0", 100000);
         std::this_thread::sleep_for(2s);
         attach_drop("dpl-a", "rail0", 0, true);
         attach_drop("dpl-b", "rail0", 0, true);
       }},
  };
  if (::access(other.c_str(), X_OK) == 0)
    actions.push_back({"node a's daemon is upgraded across map layouts and back", upgrade_a});
  else
    std::printf("soak: no upgrades: %s is not built (configure with -DDP_LAYOUT_TEST=ON)\n",
                other.c_str());

  // The faults in a random order (each once in every len(actions) rounds),
  // and at a random moment of the round's traffic; DP_SOAK_SEED replays one.
  const char* seed_env = std::getenv("DP_SOAK_SEED");
  const auto seed = static_cast<uint32_t>(seed_env ? std::strtoul(seed_env, nullptr, 10)
                                                   : std::random_device{}());
  std::printf("soak: seed %u (DP_SOAK_SEED=%u replays this order)\n", seed, seed);
  std::fflush(stdout);  // before the rounds' lines on stderr
  std::mt19937 rng(seed);
  std::vector<size_t> order;

  auto start = std::chrono::steady_clock::now();
  long rss_first = -1, rss_last = -1;
  size_t fds_first = 0, fds_last = 0;
  std::map<std::string, size_t> fds_first_kinds, fds_last_kinds;
  std::map<std::string, ClassTotals> totals;
  uint64_t bytes = 0;
  int rounds = 0;
  bool broke = false;
  while (!broke && std::chrono::steady_clock::now() - start < duration) {
    if (order.empty()) {
      for (size_t i = 0; i < actions.size(); ++i) order.push_back(i);
      std::shuffle(order.begin(), order.end(), rng);
    }
    const Action& act = actions[order.back()];
    order.pop_back();
    {
      Traffic traffic(6s, static_cast<uint16_t>(rounds));
      std::this_thread::sleep_for(std::chrono::milliseconds(1000 + rng() % 1500));
      act.run();
      broke = !traffic.intact(act.what, totals);
      bytes += traffic.bytes;
    }
    if (broke) break;
    ++rounds;
    ASSERT_TRUE(wait_all_up(60s)) << "the rails did not come back after: " << act.what;
    ASSERT_EQ(daemon_pid("dpl-b"), b) << "node b's daemon was never to restart";
    rss_last = status_kib(b, "VmRSS");
    fds_last_kinds = settled_fds(b, fds_first);
    fds_last = total(fds_last_kinds);
    if (rounds == static_cast<int>(actions.size())) {  // after the first of every action
      rss_first = rss_last;
      fds_first = fds_last;
      fds_first_kinds = fds_last_kinds;
    }
    std::fprintf(stderr, "soak: round %d (%s): intact; node b's daemon: %ld KiB, %zu fds\n", rounds,
                 act.what, rss_last, fds_last);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("soak: %d rounds in %.0f s, %.1f MB sent\n", rounds, secs,
              static_cast<double>(bytes) / 1e6);
  // the summary: what each class sent, received and lost, its broken
  // connections and its longest stall (a fault's outage included)
  std::printf("%-16s %6s %7s %12s %12s %10s %9s\n", "CLASS", "CONNS", "BROKEN", "SENT", "RECEIVED",
              "LOST", "STALL MS");
  for (const auto& [klass, c] : totals)
    std::printf("%-16s %6lu %7lu %12lu %12lu %10lu %9.0f\n", klass.c_str(),
                static_cast<unsigned long>(c.connections), static_cast<unsigned long>(c.broken),
                static_cast<unsigned long>(c.sent), static_cast<unsigned long>(c.received),
                static_cast<unsigned long>(c.sent - std::min(c.sent, c.received)),
                static_cast<double>(c.longest_stall_us) / 1000);
  for (const char* n : {"a", "b"}) {
    json st = dpctl(n, "status");
    uint64_t resets = st.is_object() ? st.value("connections_reset", uint64_t{0}) : 0;
    std::printf("soak: node %s's daemon reset %lu connections\n", n,
                static_cast<unsigned long>(resets));
    EXPECT_EQ(resets, 0u) << "the shared topology ends no connection";
  }
  EXPECT_GE(rounds, static_cast<int>(actions.size())) << "every action ran at least once";

  // nothing leaked: what dualpath made is what it was
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(footprint("dpl-a"), base_a);
  EXPECT_EQ(footprint("dpl-b"), base_b);
  auto objects = bpf_objects();
  for (int i = 0; i < 50 && objects != base_objects; ++i) {  // freed after an RCU grace period
    std::this_thread::sleep_for(100ms);
    objects = bpf_objects();
  }
  EXPECT_EQ(objects.first, base_objects.first) << "BPF programs named dp_*";
  EXPECT_EQ(objects.second, base_objects.second) << "BPF maps named dp_*";
  if (rss_first > 0) {
    std::printf("soak: node b's daemon: %ld -> %ld KiB resident, %zu -> %zu fds\n", rss_first,
                rss_last, fds_first, fds_last);
    EXPECT_LE(fds_last, fds_first)
        << "descriptors leaked:" << fd_diff(fds_first_kinds, fds_last_kinds);
    EXPECT_LE(rss_last, rss_first + 2048) << "resident memory grew by more than 2 MiB";
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto* env = new Env;
  // the node's defaults (the adaptive scheduler, burst placement), and a
  // multipath class matched by a cgroup the soak's MPTCP streams join
  fs::create_directories(cgroup2_mount() + kCollective);
  env->edit = [](const std::string& text) {
    std::string t = std::regex_replace(text, std::regex("holddown = \"5m\""),
                                       "holddown = \"3s\"\nramp_interval = \"500ms\"");
    t = std::regex_replace(t, std::regex("mode = \"static\""), "mode = \"adaptive\"");
    return t + "\n[[class]]\nname = \"collective\"\nkind = \"elastic\"\npriority = 4\n" +
           "prefer = \"rail0\"\nmultipath = true\ncgroups = [\"" + kCollective + "\"]\n";
  };
  // a clsact on b's rails for the blackhole's drop filters, as in the fault tests
  env->prepare = [] {
    must(nsenter("dpl-b") + "tc qdisc add dev rail0 clsact");
    must(nsenter("dpl-b") + "tc qdisc add dev rail1 clsact");
    return std::string();
  };
  ::testing::AddGlobalTestEnvironment(env);
  int rc = RUN_ALL_TESTS();
  std::error_code ec;
  fs::remove(cgroup2_mount() + kCollective, ec);  // empty once the children exit
  return rc;
}
