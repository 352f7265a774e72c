// SPDX-License-Identifier: Apache-2.0
// The separate topology (tools/dp-lab up --topology separate): each rail is
// its own network behind its own router, no address is valid on both rails,
// strict rp_filter everywhere. Connections are placed when they are made;
// these tests check, with the kernel's link counters on both nodes, that a
// class's traffic crosses its rail in both directions over IPv4 and IPv6, TCP
// and UDP, that the application sees the address it asked for, that class set
// places new connections, that an unmappable destination is left alone, and
// that a failed rail's connections are ended and reconnect on the survivor,
// and that a server bound to one rail's address (as frameworks given an
// interface bind) accepts what is placed on the other rail.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "lab_fixture.h"

using lab::json;
using lab::must;
using lab::sh;
using namespace lab;
using Clock = std::chrono::steady_clock;

namespace {

// b's addresses on each rail (host .2.2 on every rail's network)
const char* kB4[2] = {"10.10.2.2", "10.20.2.2"};
const char* kB6[2] = {"fd10:0:2::2", "fd20:0:2::2"};

std::string ip_of(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  else
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  std::string s = buf;
  if (s.rfind("::ffff:", 0) == 0) s = s.substr(7);  // a v4-mapped peer of a dual-stack socket
  return s;
}

// A dual-stack TCP server in dpl-b that reads whatever comes on `port`.
class Sink {
 public:
  explicit Sink(uint16_t port) {
    std::atomic<bool> ready{false};
    thread_ = std::thread([this, port, &ready] {
      in_netns("dpl-b", [&]() -> std::string {
        int l = listen_any(port);
        ready = true;
        std::vector<pollfd> fds{{l, POLLIN, 0}};
        char buf[65536];
        while (!stop_) {
          if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
          for (size_t i = 0; i < fds.size(); ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (i == 0) {
              int c = ::accept(l, nullptr, nullptr);
              if (c >= 0) fds.push_back({c, POLLIN, 0});
              continue;
            }
            ssize_t n = ::recv(fds[i].fd, buf, sizeof(buf), 0);
            if (n > 0) {
              received_ += static_cast<uint64_t>(n);
            } else {
              ::close(fds[i].fd);
              fds.erase(fds.begin() + static_cast<long>(i));
              --i;
            }
          }
        }
        for (auto& f : fds) ::close(f.fd);
        return "";
      });
    });
    while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~Sink() {
    stop_ = true;
    thread_.join();
  }
  uint64_t received() const { return received_; }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> received_{0};
};

struct Sent {
  std::string error, peer, local;
  uint64_t bytes = 0;
};

// Connects from dpl-a to dst:port (from address `src` when one is given, as
// a transport that binds its client sockets does), reads
// getpeername/getsockname, sends `bytes`.
Sent tcp_send(const std::string& dst, uint16_t port, uint64_t bytes, const std::string& src = "") {
  Sent out;
  out.error = in_netns("dpl-a", [&]() -> std::string {
    socklen_t len, slen;
    auto to = make_addr(dst, port, &len);
    int fd = ::socket(to.ss_family, SOCK_STREAM, 0);
    if (!src.empty()) {
      auto from = make_addr(src, 0, &slen);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&from), slen) != 0) {
        std::string e = std::strerror(errno);
        ::close(fd);
        return "bind to " + src + ": " + e;
      }
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), len) != 0) {
      std::string e = std::strerror(errno);
      ::close(fd);
      return "connect to " + dst + ": " + e;
    }
    sockaddr_storage peer{}, me{};
    socklen_t pl = sizeof(peer), ml = sizeof(me);
    getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl);
    getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml);
    out.peer = ip_of(peer);
    out.local = ip_of(me);
    std::vector<char> buf(65536, 'x');
    while (out.bytes < bytes) {
      ssize_t n = ::send(fd, buf.data(), std::min<uint64_t>(buf.size(), bytes - out.bytes), 0);
      if (n <= 0) break;
      out.bytes += static_cast<uint64_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
    char c;
    (void)::recv(fd, &c, 1, 0);  // the sink closes once it has read everything
    ::close(fd);
    return "";
  });
  return out;
}

struct RailBytes {
  uint64_t a[2], b[2];
};
RailBytes rail_bytes() {
  RailBytes r{};
  for (int i = 0; i < 2; ++i) {
    r.a[i] = tx_bytes("dpl-a", "rail" + std::to_string(i));
    r.b[i] = tx_bytes("dpl-b", "rail" + std::to_string(i));
  }
  return r;
}

// At least 95% of what each node sent left by `rail`, and a sent at least `min_a`.
void expect_both_ways_on(int rail, const RailBytes& before, uint64_t min_a,
                         const std::string& what) {
  RailBytes after = rail_bytes();
  uint64_t a_on = after.a[rail] - before.a[rail], a_off = after.a[1 - rail] - before.a[1 - rail];
  uint64_t b_on = after.b[rail] - before.b[rail], b_off = after.b[1 - rail] - before.b[1 - rail];
  EXPECT_GE(a_on, min_a) << what << ": a sent " << a_on << " bytes on rail" << rail;
  EXPECT_GE(a_on * 100, (a_on + a_off) * 95)
      << what << ": a, rail" << rail << " " << a_on << " B, the other " << a_off << " B";
  EXPECT_GT(b_on, 0u) << what << ": nothing came back on rail" << rail;
  EXPECT_GE(b_on * 100, (b_on + b_off) * 95)
      << what << ": b, rail" << rail << " " << b_on << " B, the other " << b_off << " B";
}

class Separate : public lab::Fixture {};

TEST_F(Separate, StatusSaysSeparateAndTheChecksPass) {
  json st = lab::dpctl("a", "status");
  EXPECT_EQ(st["topology"], "separate");
  ASSERT_EQ(st["steering"].size(), 4u) << st.dump();
  for (auto& e : st["steering"]) EXPECT_EQ(e["steering"], "connect-time") << e.dump();
  for (auto& c : st["checks"]) {
    if (c["check"] != "neighbour") {
      EXPECT_TRUE(c["ok"].get<bool>()) << c.dump();
    }
  }
}

// dpctl validate in the separate topology: the peer's address on each rail
// is learnt from its responder, and each rail is measured to that address.
TEST_F(Separate, ValidateMeasuresEachRailToThePeersAddressOnItAndNamesABlackhole) {
  auto validate = [] {
    lab::Cmd c = lab::sh(lab::dp_lab() + " dpctl a -j validate --peer 10.10.2.2 --duration 0.3");
    json j = json::parse(c.out, nullptr, false);
    EXPECT_TRUE(j.is_object()) << c.out;
    if (j.is_object()) {
      EXPECT_EQ(c.rc, j["go"].get<bool>() ? 0 : 1);
    }
    return j.is_object() ? j : json::object();
  };
  json v = validate();
  EXPECT_TRUE(v.value("go", false)) << v.dump(2);
  ASSERT_EQ(v["peers"].size(), 1u);
  const json& rails = v["peers"][0]["rails"];
  ASSERT_EQ(rails.size(), 2u);
  EXPECT_EQ(rails[0]["target"].get<std::string>().rfind("10.10.2.2:7862 from 10.10.1.1", 0), 0u)
      << rails[0].dump();
  EXPECT_EQ(rails[1]["target"].get<std::string>().rfind("10.20.2.2:7863 from 10.20.1.1", 0), 0u)
      << rails[1].dump();
  EXPECT_LT(rails[1]["throughput_bps"]["in_4"].get<double>(), 260e6) << "rail1 is 250 Mbit/s";

  lab::must(lab::dp_lab() + " fault b blackhole rail1");
  json bad = validate();
  lab::sh(lab::dp_lab() + " fault clear");
  EXPECT_FALSE(bad.value("go", true));
  bool named = false;
  for (const auto& c : bad["checks"])
    if (!c["ok"].get<bool>()) {
      EXPECT_EQ(c["path"], "rail1") << c.dump();
      named |= c["check"].get<std::string>().rfind("peer 10.10.2.2", 0) == 0;
    }
  EXPECT_TRUE(named) << bad["checks"].dump(2);

  // a peer that would refuse what is placed on its other rail: b without its
  // sk_lookup handover (the link's pin removed detaches it); a reload of b
  // attaches it again
  // one of validate's checks toward b, by path
  auto check = [](const json& reply, const std::string& name) {
    std::map<std::string, bool> ok;
    for (const auto& c : reply["checks"])
      if (c["check"] == "peer 10.10.2.2 " + name) ok[c["path"]] = c["ok"];
    return ok;
  };
  auto handover = [&](const json& reply) { return check(reply, "handover"); };
  auto udp = [&](const json& reply) { return check(reply, "udp handover"); };
  EXPECT_EQ(handover(v), (std::map<std::string, bool>{{"rail0", true}, {"rail1", true}}))
      << v["checks"].dump(2);
  EXPECT_EQ(udp(v), (std::map<std::string, bool>{{"rail0", true}, {"rail1", true}}))
      << v["checks"].dump(2);
  lab::must("rm /sys/fs/bpf/dualpath/dpl-b/link_sk_lookup");
  json refused = validate();
  lab::dpctl("b", "policy reload");
  EXPECT_EQ(handover(refused), (std::map<std::string, bool>{{"rail0", false}, {"rail1", false}}))
      << refused["checks"].dump(2);
  EXPECT_EQ(udp(refused), (std::map<std::string, bool>{{"rail0", false}, {"rail1", false}}))
      << refused["checks"].dump(2);
  EXPECT_FALSE(refused.value("go", true));
  json again = validate();
  EXPECT_EQ(handover(again), (std::map<std::string, bool>{{"rail0", true}, {"rail1", true}}));
  EXPECT_EQ(udp(again), (std::map<std::string, bool>{{"rail0", true}, {"rail1", true}}));

  // a has a multipath class: b answers MPTCP over each rail while its policy
  // has one too, and is a NO on each without
  auto mptcp = [&](const json& reply) { return check(reply, "mptcp"); };
  EXPECT_EQ(mptcp(again), (std::map<std::string, bool>{{"rail0", true}, {"rail1", true}}))
      << again["checks"].dump(2);
  const std::string file = lab::g_policies + "/lab-sep-b.toml";
  const std::string before = lab::read_file(file);
  const auto at = before.find("\n[[class]]\nname = \"collective\"");
  ASSERT_NE(at, std::string::npos);
  lab::write_file(file, before.substr(0, at) + "\n");
  json reload = lab::dpctl("b", "policy reload");
  json without = validate();
  lab::write_file(file, before);
  lab::dpctl("b", "policy reload");
  ASSERT_TRUE(reload.contains("hash")) << reload.dump();
  EXPECT_EQ(mptcp(without), (std::map<std::string, bool>{{"rail0", false}, {"rail1", false}}))
      << without["checks"].dump(2);
  EXPECT_FALSE(without.value("go", true));
  for (const auto& c : without["checks"])
    if (c["check"] == "peer 10.10.2.2 mptcp") {
      EXPECT_NE(c["detail"].get<std::string>().find("no MPTCP listener"), std::string::npos)
          << c.dump();
    }
}

TEST_F(Separate, EveryClassCrossesItsRailInBothDirectionsAndTheAppSeesItsAddress) {
  constexpr uint64_t kBytes = 4 << 20;
  struct Probe {
    std::string cls;
    uint16_t port;
    std::string dst;
    int rail;
  };
  // each class asks for b's address on the rail it does NOT prefer
  const Probe probes[] = {
      {"expert-dispatch", 50001, kB4[1], 0},
      {"expert-dispatch", 50002, kB6[1], 0},
      {"param-sync", 52001, kB4[0], 1},
      {"param-sync", 52002, kB6[0], 1},
      {"control", 53001, kB4[1], 0},
      // a dual-stack socket (Java's, torch's TCPStore) gives an IPv4 peer
      // as ::ffff:a.b.c.d
      {"param-sync", 52003, std::string("::ffff:") + kB4[0], 1},
  };
  for (const auto& p : probes) {
    Sink sink(p.port);
    RailBytes before = rail_bytes();
    Sent s = tcp_send(p.dst, p.port, kBytes);
    ASSERT_EQ(s.error, "") << p.cls;
    EXPECT_EQ(s.bytes, kBytes);
    const bool mapped = p.dst.rfind("::ffff:", 0) == 0;
    EXPECT_EQ(s.peer, mapped ? p.dst.substr(7) : p.dst)
        << p.cls << ": getpeername() gives the address the app connected to";
    std::string want_local = p.dst.find(':') != std::string::npos && !mapped
                                 ? std::string(p.rail ? "fd20:0:1::1" : "fd10:0:1::1")
                                 : std::string(p.rail ? "10.20.1.1" : "10.10.1.1");
    EXPECT_EQ(s.local, want_local) << p.cls << ": the connection lives on rail" << p.rail;
    for (int i = 0; i < 100 && sink.received() < kBytes; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(sink.received(), kBytes) << p.cls;
    expect_both_ways_on(p.rail, before, kBytes, p.cls + " to " + p.dst);
  }
}

TEST_F(Separate, AClientBoundToOneRailsAddressKeepsThatRail) {
  constexpr uint64_t kBytes = 1 << 20;
  // param-sync prefers rail1. A client bound to its rail0 address (Open
  // MPI's TCP transport binds so) stays on rail0: on rail1 its packets
  // would carry a rail0 source, which rail1's router drops. One bound to
  // its rail1 address is placed there.
  struct Case {
    const char* src;
    int rail;
  };
  for (const Case c : {Case{"10.10.1.1", 0}, Case{"10.20.1.1", 1}}) {
    Sink sink(52005);
    RailBytes before = rail_bytes();
    Sent s = tcp_send(kB4[0], 52005, kBytes, c.src);
    ASSERT_EQ(s.error, "") << "a client bound to " << c.src;
    EXPECT_EQ(s.local, c.src);
    EXPECT_EQ(s.peer, kB4[0]);
    for (int i = 0; i < 100 && sink.received() < kBytes; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(sink.received(), kBytes) << "a client bound to " << c.src;
    expect_both_ways_on(c.rail, before, kBytes, std::string("a client bound to ") + c.src);
  }
}

TEST_F(Separate, UnconnectedUdpIsPlacedPerSendAndRepliesShowTheAddressAsked) {
  // logs (rail1) sent to b's rail0 address; b echoes every datagram back
  std::atomic<bool> stop{false}, ready{false};
  std::thread echo([&] {
    in_netns("dpl-b", [&]() -> std::string {
      int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
      socklen_t len;
      auto a = make_addr("0.0.0.0", 54001, &len);
      (void)::bind(fd, reinterpret_cast<sockaddr*>(&a), len);
      timeval tv{0, 50000};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      ready = true;
      char buf[2048];
      while (!stop) {
        sockaddr_storage from{};
        socklen_t fl = sizeof(from);
        ssize_t n = ::recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
        if (n > 0)
          (void)::sendto(fd, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from),
                         fl);
      }
      ::close(fd);
      return "";
    });
  });
  while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  RailBytes before = rail_bytes();
  int echoed = 0;
  std::string from_seen;
  std::string err = in_netns("dpl-a", [&]() -> std::string {
    int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    timeval tv{0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    socklen_t len;
    auto to = make_addr(kB4[0], 54001, &len);
    std::vector<char> buf(1200, 'u');
    for (int i = 0; i < 1000; ++i) {
      (void)::sendto(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&to), len);
      sockaddr_storage from{};
      socklen_t fl = sizeof(from);
      if (::recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl) > 0) {
        ++echoed;
        from_seen = ip_of(from);
      }
    }
    ::close(fd);
    return "";
  });
  stop = true;
  echo.join();
  ASSERT_EQ(err, "");
  EXPECT_GE(echoed, 990);
  EXPECT_EQ(from_seen, kB4[0]) << "recvfrom() gives the address the app sent to";
  expect_both_ways_on(1, before, 1000 * 1200, "udp logs to b's rail0 address");
}

TEST_F(Separate, ClassSetPlacesNewConnectionsAndEstablishedOnesStay) {
  constexpr uint64_t kBytes = 2 << 20;
  lab::dpctl("a", "class set expert-dispatch rail1");
  {
    Sink sink(50011);
    RailBytes before = rail_bytes();
    Sent s = tcp_send(kB4[0], 50011, kBytes);
    ASSERT_EQ(s.error, "");
    EXPECT_EQ(s.local, "10.20.1.1");
    expect_both_ways_on(1, before, kBytes, "expert-dispatch after class set rail1");
  }
  json c = klass("a", "expert-dispatch");
  EXPECT_EQ(c["placement"], "connect-time");
  EXPECT_GE(c["connections_by_path"]["rail1"].get<uint64_t>(), 1u) << c.dump();
  lab::dpctl("a", "class unpin expert-dispatch");
  Sink sink(50012);
  Sent s = tcp_send(kB4[1], 50012, kBytes);
  EXPECT_EQ(s.local, "10.10.1.1") << "back on its policy rail (static lab)";
}

// A command run with dpctl run connects on ports no class names: its
// connection is placed by the class of its cgroup when it is made.
TEST_F(Separate, DpctlRunPlacesACommandsConnectionsByItsClass) {
  lab::dpctl("a", "class set param-sync rail1");
  auto connections = [] {
    return klass("a", "param-sync")["connections_by_path"]["rail1"].get<uint64_t>();
  };
  const std::string send =
      "bash -c 'head -c 1000000 /dev/zero > /dev/tcp/" + std::string(kB4[0]) + "/5311'";
  uint64_t before = connections();
  {
    Sink sink(5311);
    must(nsenter("dpl-a") + DP_BUILD_DIR "/tools/dpctl/dpctl -s /run/dualpath/dpl-a.sock run " +
         "--class param-sync -- " + send);
  }
  EXPECT_EQ(connections(), before + 1) << "toward rail0's address, placed on rail1";
  bool placed = false;
  json flows = lab::dpctl("a", "flow list --class param-sync --top 50")["flows"];
  for (auto& f : flows)
    placed |= f["dport"] == 5311 && f["dst"] == std::string(kB4[1]) && f["rule"] == "cgroup";
  EXPECT_TRUE(placed) << flows.dump();
  // the same command outside the cgroup is no class's: left as it was asked
  {
    Sink sink(5312);
    must(nsenter("dpl-a") + "bash -c 'head -c 1000000 /dev/zero > /dev/tcp/" + std::string(kB4[0]) +
         "/5312'");
  }
  EXPECT_EQ(connections(), before + 1);
  lab::dpctl("a", "class unpin param-sync");
}

// a's policy has a peer table (main()): b's spare addresses 10.10.2.50 on
// rail0 and 10.20.2.77 on rail1 differ in their host part, as on a fabric
// numbered apart per rail, so only the table finds the one from the other.
// b's server binds 10.20.2.77 alone: a connection to 10.10.2.50 that
// expert-dispatch places on rail1 must arrive there (by its host part it
// would go to 10.20.2.50, which no one has).
TEST_F(Separate, APeerTableFindsAPeerNumberedApartOnTheOtherRail) {
  struct Spare {
    Spare() {
      must(
          "ip -n dpl-b addr add 10.10.2.50/24 dev rail0 && ip -n dpl-b addr add 10.20.2.77/24 dev "
          "rail1");
    }
    ~Spare() {
      sh("ip -n dpl-b addr del 10.10.2.50/24 dev rail0; ip -n dpl-b addr del 10.20.2.77/24 dev "
         "rail1");
    }
  } spare;
  lab::dpctl("a", "class set expert-dispatch rail1");
  TransferSpec t;
  t.dst = "10.10.2.50";
  t.server_bind = "10.20.2.77";
  t.dport = 50021;
  t.bytes = 1 << 20;
  RailBytes before = rail_bytes();
  auto r = tcp_transfer(t);
  lab::dpctl("a", "class unpin expert-dispatch");
  ASSERT_TRUE(r.ok()) << r.error;
  expect_both_ways_on(1, before, t.bytes, "expert-dispatch to the peer table's rail1 address");
}

TEST_F(Separate, ADestinationNoRailsNetworkHoldsIsLeftAloneAndCounted) {
  uint64_t before = klass("a", "logs")["connections_unmapped"].get<uint64_t>();
  // 192.0.2.1 is in neither rail's network: sendto() reaches routing unchanged
  // (and fails there: the node has no route to it)
  EXPECT_EQ(lab::udp_send("dpl-a", "192.0.2.1", 54002, 0, 5, 100), 0);
  uint64_t after = klass("a", "logs")["connections_unmapped"].get<uint64_t>();
  EXPECT_EQ(after - before, 5u);
}

// A client of `port` (expert-dispatch, latency-sensitive) that keeps sending
// to b's rail0 address and reconnects at once when its connection ends;
// fault() breaks rail0 and clear() mends it. Returns the milliseconds from
// the fault until the first byte of a new connection reached b.
double reconnect_after(uint16_t port, const std::function<void()>& fault,
                       const std::function<void()>& clear, int* connections) {
  int64_t first = 0, t0 = 0;
  {
    ReconnectingStream stream("dpl-a", "dpl-b", kB4[0], port, 64e6);
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    EXPECT_EQ(stream.connections(), 1);
    EXPECT_GT(stream.received(), 0u);
    t0 = Clock::now().time_since_epoch().count();
    fault();
    for (int i = 0; i < 1000 && !stream.first_new_byte_since(t0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    first = stream.first_new_byte_since(t0);
    uint64_t mid = stream.received();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_GT(stream.received(), mid) << "the new connection keeps being carried";
    *connections = stream.connections();
  }
  clear();
  if (!first) return -1;
  return static_cast<double>(first - t0) / 1e6;
}

bool events_say(const std::string& text) {
  json ev = lab::dpctl("a", "events");
  if (ev.is_object()) ev = ev["events"];
  for (auto& e : ev)
    if (e["reason"].get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

// ---------------------------------------------------------------- multipath classes
// The class "collective" (multipath = true, cgroups = ["/dpl-collective"],
// elastic, prefer rail0) is added to both nodes' policies by main(), and
// "mp-port" (multipath, ports 61200-61209, outside the ephemeral range).
// Their MPTCP connections get a subflow per rail from the daemons.

constexpr const char* kCollective = "/dpl-collective";
// A port of the class "mp-port" (multipath by its port, beside collective).
constexpr uint16_t kMpPort = 61200;

TransferSpec collective_transfer(uint16_t port, uint64_t bytes, double rate_bps) {
  TransferSpec t;
  t.dst = kB4[0];
  t.server_bind = kB4[0];  // as a framework given rail0's interface binds
  t.dport = port;
  t.bytes = bytes;
  t.rate_bps = rate_bps;
  t.cgroup = kCollective;
  t.mptcp = true;
  return t;
}

// The most each of ns's TCP sockets on port is paced at, by the address
// of the node's end.
std::map<std::string, uint64_t> max_pacing(const std::string& ns, uint16_t port) {
  std::map<std::string, uint64_t> out;
  static const std::regex local(R"(^\S+\s+\d+\s+\d+\s+\[?(?:::ffff:)?([0-9.]+)\]?(%\S+)?:\d+)");
  auto p = std::to_string(port);
  for (const auto& sock : tcp_sockets(ns, "( sport = :" + p + " or dport = :" + p + " )")) {
    std::smatch m;
    if (std::regex_search(sock, m, local)) out[m[1]] = max_pacing_bps(sock);
  }
  return out;
}

// The receive buffers (ss's skmem rb) of ns's sockets on local port `port`:
// the TCP subflows' by the node's address, the MPTCP connection's as "mptcp".
std::map<std::string, uint64_t> receive_buffers(const std::string& ns, uint16_t port) {
  std::map<std::string, uint64_t> out;
  static const std::regex local(
      R"(^(?:[A-Z-]+\s+)?\d+\s+\d+\s+\[?(?:::ffff:)?([0-9.]+)\]?(%\S+)?:\d+)");
  static const std::regex rb(R"(skmem:\(r\d+,rb(\d+),)");
  auto filter = "'( sport = :" + std::to_string(port) + " )'";
  for (const char* kind : {"-t", "-M"}) {
    std::istringstream in(
        sh("ip netns exec " + ns + " ss " + kind + "nmH state established " + filter).out);
    std::string first, info;
    while (std::getline(in, first) && std::getline(in, info)) {
      std::smatch a, b;
      if (!std::regex_search(info, b, rb)) continue;
      if (std::string(kind) == "-M")
        out["mptcp"] = std::stoull(b[1]);
      else if (std::regex_search(first, a, local))
        out[a[1]] = std::stoull(b[1]);
    }
  }
  return out;
}

TEST_F(Separate, AMultipathConnectionGetsASubflowOnEachRailAndTheBoundServerAcceptsTheJoin) {
  // 20 Mbit/s for 3 s: long enough to look at it while it runs
  Transfer t(collective_transfer(45101, 7'500'000, 20e6));
  // the same process's connection to a port of the class "mp-port"
  // (multipath, latency-sensitive, prefer rail1): MPTCP by collective's
  // cgroup, with mp-port's subflows and roles
  Transfer tp(collective_transfer(kMpPort, 7'500'000, 20e6));
  json a = wait_conn("a", 45101, 3000, [](const json& c) {
    return subflow_paths(c) == std::set<std::string>{"rail0", "rail1"};
  });
  json b = wait_conn("b", 45101, 1000, [](const json& c) { return c["subflows"].size() == 2; });
  json ap = wait_conn("a", kMpPort, 1000, [](const json& c) {
    return subflow_paths(c, "active") == std::set<std::string>{"rail1"} &&
           subflow_paths(c, "backup") == std::set<std::string>{"rail0"};
  });
  // each subflow, at both ends, is paced at most at its rail's capacity (the
  // lab policies': 1 Gbit and 250 Mbit), so that MPTCP's scheduler weighs
  // the rails by what they carry
  auto pa = max_pacing("dpl-a", 45101), pb = max_pacing("dpl-b", 45101);
  auto r = t.wait();
  auto rp = tp.wait();
  ASSERT_TRUE(ap.is_object()) << lab::dpctl("a", "flow list").dump();
  EXPECT_EQ(ap["class"], "mp-port");
  EXPECT_EQ(subflow_paths(ap, "active"), std::set<std::string>{"rail1"}) << ap.dump();
  EXPECT_EQ(subflow_paths(ap, "backup"), std::set<std::string>{"rail0"}) << ap.dump();
  EXPECT_TRUE(rp.ok()) << rp.error;
  EXPECT_TRUE(rp.client_mptcp && rp.server_mptcp) << "mp-port's connection fell back to TCP";
  EXPECT_EQ(pa, (std::map<std::string, uint64_t>{{"10.10.1.1", 1'000'000'000},
                                                 {"10.20.1.1", 250'000'000}}));
  EXPECT_EQ(pb, (std::map<std::string, uint64_t>{{kB4[0], 1'000'000'000}, {kB4[1], 250'000'000}}));
  ASSERT_TRUE(r.ok()) << r.error << " sent " << r.sent << " received " << r.received;
  EXPECT_TRUE(r.client_mptcp && r.server_mptcp) << "the connection fell back to TCP";
  ASSERT_TRUE(a.is_object()) << "dpctl flow list on a shows no MPTCP connection: "
                             << lab::dpctl("a", "flow list").dump();
  EXPECT_EQ(a["class"], "collective");
  EXPECT_EQ(a["side"], "connected");
  EXPECT_EQ(subflow_paths(a), (std::set<std::string>{"rail0", "rail1"})) << a.dump();
  // elastic, all of its decision on rail0: rail0 carries, rail1 stands by
  EXPECT_EQ(subflow_paths(a, "active"), std::set<std::string>{"rail0"}) << a.dump();
  EXPECT_EQ(subflow_paths(a, "backup"), std::set<std::string>{"rail1"}) << a.dump();
  for (auto& sf : a["subflows"]) {
    if (sf["path"] == "rail1") {
      EXPECT_EQ(sf["remote"], kB4[1]) << "the join goes to b's rail1 address";
    }
  }
  // b's server listens on its rail0 address only: the join reached b's daemon's
  // join listener on its rail1 address and belongs to the same connection
  ASSERT_TRUE(b.is_object()) << lab::dpctl("b", "flow list").dump();
  EXPECT_EQ(b["side"], "accepted");
  EXPECT_EQ(b["subflows"].size(), 2u) << b.dump();
  auto m = sh(nsenter("dpl-a") + "curl -s http://127.0.0.1:9464/metrics");
  EXPECT_NE(m.out.find("dualpath_multipath_actions_total{action=\"created\"}"), std::string::npos);
}

TEST_F(Separate, ClassSetSwitchesTheRolesOfEstablishedMultipathConnections) {
  // dual-stack sockets at both ends (as Java's and torch's TCPStore are):
  // the first subflow is an IPv6 socket on ::ffff:10.10.x.x, the joins are
  // IPv4, and the roles of both switch
  auto spec = collective_transfer(45102, 15'000'000, 20e6);  // 6 s
  spec.dst = spec.server_bind = std::string("::ffff:") + kB4[0];
  Transfer t(spec);
  json c = wait_conn("a", 45102, 3000, [](const json& x) {
    return subflow_paths(x, "active") == std::set<std::string>{"rail0"} &&
           subflow_paths(x, "backup") == std::set<std::string>{"rail1"};
  });
  ASSERT_EQ(subflow_paths(c, "active"), std::set<std::string>{"rail0"}) << c.dump();
  EXPECT_EQ(c["remote"], kB4[0]) << "an IPv4-mapped peer is shown as the IPv4 address";
  RailBytes before = rail_bytes();
  must(dp_lab() + " dpctl a class set collective rail1");
  // within a tick and a round trip
  c = wait_conn("a", 45102, 1000, [](const json& x) {
    return subflow_paths(x, "active") == std::set<std::string>{"rail1"};
  });
  EXPECT_EQ(subflow_paths(c, "active"), std::set<std::string>{"rail1"}) << c.dump();
  EXPECT_EQ(subflow_paths(c, "backup"), std::set<std::string>{"rail0"}) << c.dump();
  bool said = false;
  json events = lab::dpctl("a", "events");
  for (auto& e : events["events"])
    said = said || (e["kind"] == "multipath" &&
                    e["reason"].get<std::string>().find("collective: the rail1 subflow of 1 MPTCP "
                                                        "connection made active") == 0);
  EXPECT_TRUE(said) << "dpctl events says which roles changed: " << events.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  RailBytes mid = rail_bytes();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  RailBytes after = rail_bytes();
  // the second after the switch: the stream crossed rail1
  EXPECT_GT(after.a[1] - mid.a[1], 1'000'000u) << "a sent little on rail1 after the switch";
  EXPECT_LT(after.a[0] - mid.a[0], (after.a[1] - mid.a[1]) / 10) << "a still sends on rail0";
  (void)before;
  must(dp_lab() + " dpctl a class unpin collective");
  auto r = t.wait();
  EXPECT_TRUE(r.ok()) << r.error;
}

uint64_t metric_on(const char* ns, const std::string& key) {
  auto m = sh(nsenter(ns) + "curl -s http://127.0.0.1:9464/metrics");
  auto at = m.out.find("\n" + key + " ");  // the sample, not its # HELP line
  return at == std::string::npos ? 0 : std::stoull(m.out.substr(at + key.size() + 2));
}

TEST_F(Separate, AMultipathConnectionToAPeerWithoutMptcpFallsBackToTcpAndIsCounted) {
  uint64_t before = metric_on("dpl-a", "dualpath_mptcp_fallbacks_total");
  auto spec = collective_transfer(45105, 1'000'000, 0);
  spec.server_tcp = true;
  auto r = tcp_transfer(spec);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.client_mptcp) << "a plain TCP peer: the connection is TCP";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a tick publishes it
  EXPECT_GE(metric_on("dpl-a", "dualpath_mptcp_fallbacks_total"), before + 1);
}

// A peer that does not run dualpath (b's daemon stopped and its datapath
// removed): a connection of a class placed on the rail the application did
// not ask for reaches b's server listening on every address, on that rail;
// a multipath connection to a server bound to b's rail0 address gets no
// rail1 subflow (nothing on b hands the join to it) and carries every byte
// over its first one with no stall; `dpctl validate --peer` says that no
// dualpath answers there.
TEST_F(Separate, APeerWithoutDualpathGetsItsClassesAndAMultipathClassKeepsOneSubflow) {
  LabDaemonAfter restart("b");
  must(dp_lab() + " stop b");
  {
    Sink sink(52051);
    RailBytes before = rail_bytes();
    Sent sent = tcp_send(kB4[0], 52051, 4 << 20);  // param-sync: rail1
    ASSERT_EQ(sent.error, "");
    EXPECT_EQ(sent.local, "10.20.1.1") << "param-sync lives on rail1, as with a dualpath peer";
    for (int i = 0; i < 100 && sink.received() < (4u << 20); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(sink.received(), 4u << 20);
    expect_both_ways_on(1, before, 4 << 20, "param-sync to a peer without dualpath");
  }
  Transfer t(collective_transfer(45107, 5'000'000, 20e6));  // 2 s
  std::set<std::string> paths;
  for (int i = 0; i < 5; ++i) {
    json c = wait_conn("a", 45107, 500, [](const json&) { return true; });
    if (c.is_object())
      for (const auto& p : subflow_paths(c)) paths.insert(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  auto r = t.wait();
  ASSERT_TRUE(r.ok()) << r.error << " sent " << r.sent << " received " << r.received;
  EXPECT_TRUE(r.client_mptcp && r.server_mptcp) << "MPTCP over its first subflow";
  EXPECT_EQ(paths, std::set<std::string>{"rail0"}) << "no rail1 subflow without b's join listener";
  std::cout << "[ measured ] the multipath connection's longest stall " << r.max_gap_us / 1000
            << " ms\n";
  auto v = sh(dp_lab() + " dpctl a validate --peer " + kB4[0] + " --duration 0.3");
  EXPECT_NE(v.rc, 0) << v.out;
  EXPECT_NE(v.out.find("is dualpathd running there"), std::string::npos) << v.out;
}

// b's rail1 behind a firewall that does not know MPTCP, which gives every
// join's SYN `verdict` ("reject with tcp reset", "drop") while it lives.
// Firewall rules on b's rail1 for MPTCP joins (MP_JOIN SYNs) toward one
// port each: `verdict` per port. Removed whatever the test's outcome.
struct JoinFirewall {
  explicit JoinFirewall(const std::vector<std::pair<uint16_t, std::string>>& rules) {
    const std::string b = nsenter("dpl-b");
    must(b + "nft add table inet dptest");
    must(b + "nft 'add chain inet dptest in { type filter hook input priority 0; }'");
    for (const auto& [port, verdict] : rules)
      must(b + "nft add rule inet dptest in iifname rail1 tcp dport " + std::to_string(port) +
           " tcp option mptcp subtype 1 " + verdict);
  }
  ~JoinFirewall() { sh(nsenter("dpl-b") + "nft delete table inet dptest"); }
  JoinFirewall(const JoinFirewall&) = delete;
  JoinFirewall& operator=(const JoinFirewall&) = delete;
};

// How many times a daemon's log `text` says that it stopped asking for a
// connection's rail1 joins.
size_t gave_up_said(const std::string& text) {
  size_t n = 0;
  for (size_t at = 0;
       (at = text.find("joins in a row on rail1 never came up", at)) != std::string::npos; ++at)
    ++n;
  return n;
}

// Two firewalls on b's rail1 that do not know MPTCP, one connection through
// each, side by side (a connection's joins are given up on their own):
// - one refuses every join (an RST to each MP_JOIN SYN): a's daemon stops
//   asking after 6 joins that never came up (about 22 s: 0.1 + 2 + 4 + 8 + 8);
// - one drops every join's SYN without a word (the commoner middlebox): a
//   join would retry its SYN for about two minutes (tcp_syn_retries), and one
//   asked for every few seconds meanwhile would pile up. a's daemon ends a
//   join that is not up after multipath::kJoinTimeout and counts it as one
//   that never came up, so it stops asking after 6 (about 35 s: 6 x 2 s + 1
//   + 2 + 4 + 8 + 8) and never has more than one join pending on the rail.
// The daemon says so once per connection, and each connection goes on over
// its first subflow with every byte delivered.
TEST_F(Separate, JoinsAFirewallRefusesOrDropsAreGivenUpAndTheConnectionsGoOn) {
  constexpr uint16_t kRefused = 45106, kDropped = 45108;
  JoinFirewall firewall({{kRefused, "reject with tcp reset"}, {kDropped, "drop"}});
  auto said = [&] { return gave_up_said(daemon_log("dpl-a")); };
  // a's TCP sockets toward the dropping port that are still sending their SYN
  auto pending = [] {
    auto out =
        sh(nsenter("dpl-a") + "ss -Htn state syn-sent dport = :" + std::to_string(kDropped)).out;
    return static_cast<size_t>(std::count(out.begin(), out.end(), '\n'));
  };
  Transfer refused(collective_transfer(kRefused, 60'000'000, 20e6));   // 24 s
  Transfer dropped(collective_transfer(kDropped, 100'000'000, 20e6));  // 40 s
  auto start = Clock::now();
  std::map<uint16_t, std::set<std::string>> paths;
  size_t most_pending = 0;
  int64_t refused_ms = -1;
  auto ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  };
  auto end = start + std::chrono::seconds(50);
  while (Clock::now() < end && said() < 2) {
    for (uint16_t port : {kRefused, kDropped}) {
      json c = wait_conn("a", port, 250, [](const json&) { return true; });
      if (c.is_object())
        for (const auto& p : subflow_paths(c)) paths[port].insert(p);
    }
    most_pending = std::max(most_pending, pending());
    if (refused_ms < 0 && said() == 1) refused_ms = ms();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  std::cout << "[ measured ] refused joins given up after " << refused_ms
            << " ms, dropped ones after " << ms() << " ms; at most " << most_pending
            << " dropped join pending at once\n";
  EXPECT_EQ(said(), 2u) << "a's daemon says once per connection that it stopped asking";
  EXPECT_LE(most_pending, 1u) << "joins asked for while one was still pending";
  for (uint16_t port : {kRefused, kDropped})
    EXPECT_EQ(paths[port], std::set<std::string>{"rail0"})
        << "port " << port << ": no rail1 subflow ever came up";
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(pending(), 0u) << "a join still pending after the daemon gave up";
  for (auto* t : {&refused, &dropped}) {
    auto r = t->wait();
    ASSERT_TRUE(r.ok()) << r.error << " sent " << r.sent << " received " << r.received;
    EXPECT_TRUE(r.client_mptcp && r.server_mptcp) << "MPTCP over its first subflow";
    EXPECT_EQ(r.received, t == &refused ? 60'000'000u : 100'000'000u);
  }
}

// The issue's case: a collective job whose rail fails mid-transfer. b's rail0
// loses its carrier; the connection carries on over rail1 with no reset and
// every byte delivered, and gets its rail0 subflow back after the hold-down
// (rail0 is its first subflow's: made again from that address).
TEST_F(Separate, AMultipathConnectionSurvivesTheCarrierLossOfItsActiveRail) {
  Transfer t(collective_transfer(45103, 30'000'000, 20e6));  // 12 s
  json c = wait_conn("a", 45103, 3000, [](const json& x) { return subflow_paths(x).size() == 2; });
  ASSERT_EQ(subflow_paths(c), (std::set<std::string>{"rail0", "rail1"})) << c.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  must(nsenter("dpl-b") + "ip link set rail0 down");
  // b removes its rail0 subflow at once
  json b =
      wait_conn("b", 45103, 1000, [](const json& x) { return !subflow_paths(x).count("rail0"); });
  EXPECT_EQ(subflow_paths(b), std::set<std::string>{"rail1"}) << b.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  must(nsenter("dpl-b") + "ip link set rail0 up");
  sh(nsenter("dpl-b") + "ip route replace 10.10.0.0/16 via 10.10.2.254 dev rail0");
  sh(nsenter("dpl-b") + "ip -6 route replace fd10::/32 via fd10:0:2::fe dev rail0");
  // b takes rail0 back after its hold-down; until then it closes the rail0
  // subflow that a makes again, backing off, once its own rail0 is back.
  for (int i = 0; i < 160 && lab::rail_state("b", "rail0") != "up"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(lab::rail_state("b", "rail0"), "up") << "b's rail0 never left its hold-down";
  auto both = [](const json& x) { return subflow_paths(x).size() == 2; };
  json b2 = wait_conn("b", 45103, 5000, both);  // a backs off: 1, 2, 4 s
  EXPECT_EQ(subflow_paths(b2), (std::set<std::string>{"rail0", "rail1"})) << b2.dump();
  c = wait_conn("a", 45103, 1000, both);
  EXPECT_EQ(subflow_paths(c), (std::set<std::string>{"rail0", "rail1"})) << c.dump();
  // Each subflow at the receiving end can take the connection's window: the
  // kernel starts a subflow at tcp_rmem's default and raises it only when the
  // connection's buffer grows again, so rail0's subflow, made again long after
  // that growth, would stay there (the sender then stalls for 200 ms at each
  // burst that outruns ~115 KB). The sockops program gives it the
  // connection's buffer (bpf/lib/sockops.h, dp_join_rcvbuf).
  uint64_t rmem_default =
      std::stoull(sh(nsenter("dpl-b") + "sh -c 'cut -f2 /proc/sys/net/ipv4/tcp_rmem'").out);
  std::map<std::string, uint64_t> rb;
  for (int i = 0; i < 40; ++i) {
    rb = receive_buffers("dpl-b", 45103);
    if (rb.count(kB4[0]) && rb.count(kB4[1])) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(rb["mptcp"], rmem_default) << "the connection's buffer never grew";
  for (const char* addr : {kB4[0], kB4[1]})
    EXPECT_GT(rb[addr], rmem_default) << "b's subflow at " << addr << " kept tcp_rmem's default";
  auto r = t.wait();
  EXPECT_TRUE(r.ok()) << r.error << " sent " << r.sent << " received " << r.received;
  EXPECT_EQ(r.sent, 30'000'000u);
  EXPECT_TRUE(r.client_mptcp && r.server_mptcp) << "the connection fell back to TCP";
  std::printf(
      "    multipath, carrier loss of the active rail: longest gap at the receiver %.0f ms\n",
      static_cast<double>(r.max_gap_us) / 1000);
  // rail0 back from its hold-down before the next test
  wait_rails_up(std::chrono::seconds(15));
}

// On this machine's kernel fmod_ret programs are refused, so dpctl run makes
// the command's sockets MPTCP through mptcpize; with the hook, the kernel does.
// Either way a command that asks for plain TCP gets an MPTCP connection.
TEST_F(Separate, ACommandRunInAMultipathClassConnectsWithMptcp) {
  std::atomic<bool> ready{false}, mptcp{false};
  std::string error;
  std::thread server([&] {
    error = in_netns("dpl-b", [&]() -> std::string {
      int l = ::socket(AF_INET, SOCK_STREAM, 262);
      int one = 1;
      setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      socklen_t len;
      auto addr = make_addr(kB4[0], 45104, &len);
      if (::bind(l, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(l, 4) != 0) {
        ready = true;
        return std::string("listen: ") + std::strerror(errno);
      }
      ready = true;
      pollfd pfd{l, POLLIN, 0};
      if (::poll(&pfd, 1, 5000) <= 0) {
        ::close(l);
        return "nothing connected";
      }
      int c = ::accept(l, nullptr, nullptr);
      ::close(l);
      char buf[16];
      (void)::recv(c, buf, sizeof(buf), 0);
      // the accepted socket has not fallen back, so the client spoke MPTCP
      mptcp = is_mptcp(c);
      ::close(c);
      return "";
    });
  });
  while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto run = sh(nsenter("dpl-a") + dp_lab() +
                " dpctl a run --class collective -- bash -c 'exec 3<>/dev/tcp/10.10.2.2/45104; "
                "echo hello >&3; exec 3>&-'");
  server.join();
  EXPECT_EQ(run.rc, 0) << run.out;
  EXPECT_EQ(error, "");
  EXPECT_TRUE(mptcp) << "the command's connection was plain TCP";
}

// The MPTCP settings multipath classes need are made by the daemon, and what
// it changed, only that, is kept to restore (a setting already as needed is
// not its own: an operator's, which --cleanup must leave).
TEST_F(Separate, TheMptcpSettingsItChangedAreKeptToRestoreAndNoOthers) {
  std::ifstream f("/run/dualpath/dpl-a.mptcp-sysctls");
  ASSERT_TRUE(f) << "no /run/dualpath/dpl-a.mptcp-sysctls: the lab's fresh namespace had "
                    "path_manager, blackhole_timeout and stale_loss_cnt at their defaults";
  const std::map<std::string, std::string> needed = {{"enabled", "1"},
                                                     {"path_manager", "userspace"},
                                                     {"pm_type", "1"},
                                                     {"blackhole_timeout", "0"},
                                                     {"stale_loss_cnt", "2"}};
  std::set<std::string> keys;
  for (std::string line; std::getline(f, line);) {
    auto eq = line.find('=');
    ASSERT_NE(eq, std::string::npos) << line;
    std::string key = line.substr(0, eq), before = line.substr(eq + 1);
    ASSERT_TRUE(needed.count(key)) << "kept a setting it does not make: " << line;
    EXPECT_TRUE(keys.insert(key).second) << "kept twice: " << key;
    EXPECT_NE(before, needed.at(key)) << key << " was already as needed: not the daemon's";
    std::string now = must(nsenter("dpl-a") + "cat /proc/sys/net/mptcp/" + key);
    EXPECT_EQ(now.substr(0, now.find('\n')), needed.at(key)) << key;
  }
  EXPECT_FALSE(keys.count("enabled")) << "a new namespace has MPTCP enabled already";
  EXPECT_TRUE(keys.count("blackhole_timeout")) << "its default is 3600";
}

TEST_F(Separate, ABlackholedRailsConnectionsAreEndedAndAReconnectingClientIsCarriedOnTheOther) {
  // rail0's router drops everything both ways; the carrier stays up
  for (const char* dev : {"to-a", "to-b"})
    must(nsenter("dpl-r0") + "tc qdisc add dev " + dev + " clsact");
  int connections = 0;
  double ms = reconnect_after(
      50031,
      [] {
        for (const char* dev : {"to-a", "to-b"}) EXPECT_EQ(attach_drop("dpl-r0", dev, 100000), "");
      },
      [] {
        for (const char* dev : {"to-a", "to-b"}) {
          EXPECT_EQ(attach_drop("dpl-r0", dev, 0, true), "");
          must(nsenter("dpl-r0") + "tc qdisc del dev " + dev + " clsact");
        }
      },
      &connections);
  std::printf(
      "    separate topology, blackhole of rail0: a reconnecting latency-sensitive client "
      "carried again after %.0f ms (%d connections)\n",
      ms, connections);
  ASSERT_GE(ms, 0) << "the client was never carried again";
  EXPECT_GE(connections, 2) << "the connection on the suspect rail was ended";
  EXPECT_TRUE(events_say("rail0 is suspect: ended")) << "dpctl events says what was ended";
  // rail0 comes back from its suspicion (or hold-down) before the next test
  for (int i = 0; i < 100 && lab::dpctl("a", "path show rail0")["health"]["state"] != "up"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

TEST_F(Separate, AFailedRailsConnectionsAreEndedAndAReconnectingClientIsCarriedOnTheOther) {
  int connections = 0;
  double ms = reconnect_after(
      50021, [] { must(nsenter("dpl-r0") + "ip link set to-a down"); },
      [] { must(nsenter("dpl-r0") + "ip link set to-a up"); }, &connections);
  std::printf(
      "    separate topology, carrier loss on rail0: a reconnecting client carried again "
      "after %.0f ms (%d connections)\n",
      ms, connections);
  ASSERT_GE(ms, 0) << "the client was never carried again";
  EXPECT_GE(connections, 2) << "the connection on the failed rail was ended";
  EXPECT_GE(lab::dpctl("a", "status")["connections_reset"].get<uint64_t>(), 1u);
  EXPECT_TRUE(events_say("rail0 failed: ended")) << "dpctl events says what was ended";
}

// Each router's link to node a set down (both ends lose carrier), set up
// again whatever the test's outcome.
struct RoutersDown {
  std::set<int> down;
  void set(int rail, bool up) {
    must(nsenter("dpl-r" + std::to_string(rail)) + "ip link set to-a " + (up ? "up" : "down"));
    if (!up) {
      down.insert(rail);
      return;
    }
    down.erase(rail);
    // what a link set down loses (tools/dp-lab): the router's IPv6 address
    // toward a, and a's routes toward the rail's network
    const std::string n = rail == 0 ? "10" : "20", dev = " dev rail" + std::to_string(rail);
    sh(nsenter("dpl-r" + std::to_string(rail)) + "ip -6 addr replace fd" + n +
       ":0:1::fe/64 dev to-a nodad");
    sh(nsenter("dpl-a") + "ip route replace 10." + n + ".0.0/16 via 10." + n + ".1.254" + dev);
    sh(nsenter("dpl-a") + "ip -6 route replace fd" + n + "::/32 via fd" + n + ":0:1::fe" + dev);
  }
  ~RoutersDown() {
    for (int r : std::set<int>(down)) set(r, true);
  }
};

std::string rail_health(const std::string& rail) {
  json p = lab::dpctl("a", "path show " + rail);
  return p.is_object() && p.contains("health") ? p["health"]["state"].get<std::string>() : "?";
}

template <class P>
bool eventually(P pred, std::chrono::milliseconds timeout) {
  auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

double shares_on(const std::string& name, const std::string& rail) {
  for (auto& c : lab::dpctl("a", "class list"))
    if (c["name"] == name && c.contains("shares")) return c["shares"].value(rail, -1.0);
  return -1.0;
}

// Every rail down, then rail1 back, then rail0: the first rail back carries
// a reconnecting client at once (no hold-down while nothing else carries);
// the second is held down and ramped behind it.
TEST_F(Separate, BothRailsDownThenTheFirstBackCarriesAReconnectingClient) {
  RoutersDown routers;
  ReconnectingStream stream("dpl-a", "dpl-b", kB4[0], 50041, 64e6);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  ASSERT_GT(stream.received(), 0u);
  routers.set(0, false);
  routers.set(1, false);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(rail_health("rail0"), "down");
  EXPECT_EQ(rail_health("rail1"), "down");
  int64_t back = Clock::now().time_since_epoch().count();
  routers.set(1, true);
  EXPECT_TRUE(
      eventually([&] { return stream.first_new_byte_since(back) != 0; }, std::chrono::seconds(10)))
      << "the client was never carried again";
  EXPECT_TRUE(eventually([] { return rail_health("rail1") == "up"; }, std::chrono::seconds(5)))
      << "rail1 is " << rail_health("rail1") << ": the first rail back serves no hold-down";
  if (int64_t first = stream.first_new_byte_since(back))
    std::printf(
        "    separate topology, every rail down for 3 s: a reconnecting client "
        "carried again %.0f ms after the first rail was back\n",
        static_cast<double>(first - back) / 1e6);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  routers.set(0, true);
  EXPECT_TRUE(
      eventually([] { return rail_health("rail0") == "holddown"; }, std::chrono::seconds(5)))
      << "the second rail back is held down";
  EXPECT_TRUE(eventually([] { return rail_health("rail0") == "up"; }, std::chrono::seconds(10)));
  EXPECT_EQ(shares_on("expert-dispatch", "rail0"), 100) << "back on its rail";
}

// The daemon of node a killed in the middle of a failover (100 ms after it
// suspected the blackholed rail0) and started again 300 ms later. The rails
// here are routed and run no BFD, so nothing can say that rail0 forwards:
// the new daemon takes it over as failed and serves its hold-down (3 s)
// before the ramp tries it, where the same fault without a restart would
// have ramped at once; a reconnecting client is carried on rail1, and the
// class returns to rail0 once the blackhole ends.
TEST_F(Separate, ARestartInTheMiddleOfAFailoverKeepsTheBlackholedRailFailed) {
  struct Drops {
    bool on = false;
    void set(bool drop) {
      for (const char* dev : {"to-a", "to-b"}) {
        if (drop) must(nsenter("dpl-r0") + "tc qdisc add dev " + dev + " clsact");
        EXPECT_EQ(attach_drop("dpl-r0", dev, drop ? 100000 : 0, !drop), "");
        if (!drop) must(nsenter("dpl-r0") + "tc qdisc del dev " + dev + " clsact");
      }
      on = drop;
    }
    ~Drops() {
      if (on) set(false);
    }
  } drops;
  ReconnectingStream stream("dpl-a", "dpl-b", kB4[0], 50051, 64e6);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  ASSERT_GT(stream.received(), 0u);
  drops.set(true);
  ASSERT_TRUE(eventually([] { return rail_health("rail0") != "up"; }, std::chrono::seconds(5)))
      << "the blackhole was never noticed";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pid_t pid = lab::daemon_pid("dpl-a");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  lab::wait_gone(pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  uint64_t before = stream.received();
  must(lab::dp_lab() + " start a");
  std::set<std::string> states;
  auto end = Clock::now() + std::chrono::milliseconds(2500);  // inside the hold-down
  while (Clock::now() < end) {
    states.insert(rail_health("rail0"));
    double s = shares_on("expert-dispatch", "rail0");
    if (s >= 0) {
      EXPECT_EQ(s, 0) << "expert-dispatch was placed on the blackholed rail0";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_FALSE(states.count("up") || states.count("ramping"))
      << "rail0 was taken back inside its hold-down: " << json(states).dump();
  EXPECT_TRUE(events_say("before the restart")) << "dpctl events says what was taken over";
  EXPECT_GT(stream.received(), before) << "the client is carried (on rail1)";
  drops.set(false);
  EXPECT_TRUE(eventually([] { return rail_health("rail0") == "up"; }, std::chrono::seconds(15)))
      << "rail0 is " << rail_health("rail0");
  EXPECT_EQ(shares_on("expert-dispatch", "rail0"), 100) << "expert-dispatch found its way back";
}

// The address of interface `ifname` in `family` (not link-local), with
// `port`, found with getifaddrs() in the calling thread's namespace, the way
// frameworks given an interface find theirs (GLOO_SOCKET_IFNAME,
// NCCL_SOCKET_IFNAME). Returns its length, 0 if it has none.
socklen_t if_addr(const std::string& ifname, int family, uint16_t port, sockaddr_storage* addr) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return 0;
  socklen_t len = 0;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || ifname != i->ifa_name || i->ifa_addr->sa_family != family) continue;
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
      continue;
    len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(addr, i->ifa_addr, len);
    break;
  }
  freeifaddrs(ifs);
  if (len) reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(port);  // same offset in both
  return len;
}

// A socket of `type` in the calling thread's namespace, with SO_REUSEADDR,
// bound to interface `ifname`'s address ("*": the unspecified one) and
// `port`, as frameworks given an interface bind; *bound is that address. -1
// with *error set when it cannot be.
// kMapped: an IPv6 socket bound to the interface's IPv4 address as
// ::ffff:a.b.c.d, as Java binds a server to an IPv4 address.
constexpr int kMapped = -AF_INET;

int bind_on(const std::string& ifname, int family, uint16_t port, int type, std::string* bound,
            std::string* error) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (ifname == "*")
    addr = make_addr(family == AF_INET ? "0.0.0.0" : "::", port, &len);
  else
    len = if_addr(ifname, family == kMapped ? AF_INET : family, port, &addr);
  if (!len) {
    *error = "no address on " + ifname;
    return -1;
  }
  *bound = ip_of(addr);
  if (family == kMapped) {
    addr = make_addr("::ffff:" + *bound, port, &len);
    family = AF_INET6;
  }
  int fd = ::socket(family, type, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    *error = "bind on " + *bound + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// A server in dpl-b bound the way frameworks given an interface bind
// (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, an RPC server's --host): to that
// interface's address, found with getifaddrs(). It accepts one connection,
// reads until the peer shuts down, answers one byte and says what its
// accepted socket shows.
class BoundServer {
 public:
  BoundServer(const std::string& ifname, int family, uint16_t port) {
    std::atomic<bool> ready{false};
    thread_ = std::thread([this, ifname, family, port, &ready] {
      error_ = in_netns("dpl-b", [&]() -> std::string {
        std::string err;
        int l = bind_on(ifname, family, port, SOCK_STREAM, &bound_, &err);
        if (l >= 0 && ::listen(l, 8) != 0) {
          err = "listen on " + bound_ + ": " + std::strerror(errno);
          ::close(l);
          l = -1;
        }
        ready = true;
        if (l < 0) return err;
        pollfd pfd{l, POLLIN, 0};
        if (::poll(&pfd, 1, 3000) <= 0) {
          ::close(l);
          return "";  // nothing came: accepted_ stays false
        }
        int c = ::accept(l, nullptr, nullptr);
        ::close(l);
        if (c < 0) return std::string("accept: ") + std::strerror(errno);
        accepted_ = true;
        sockaddr_storage me{}, peer{};
        socklen_t ml = sizeof(me), pl = sizeof(peer);
        getsockname(c, reinterpret_cast<sockaddr*>(&me), &ml);
        getpeername(c, reinterpret_cast<sockaddr*>(&peer), &pl);
        local_ = ip_of(me);
        peer_ = ip_of(peer);
        char buf[65536];
        for (ssize_t n; (n = ::recv(c, buf, sizeof(buf), 0)) > 0;)
          received_ += static_cast<uint64_t>(n);
        (void)::send(c, "k", 1, 0);
        ::close(c);
        return "";
      });
    });
    while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~BoundServer() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::string error_, bound_, local_, peer_;
  bool accepted_ = false;
  uint64_t received_ = 0;

 private:
  std::thread thread_;
};

uint64_t handovers_on_b(const std::string& path) {
  auto m = sh(nsenter("dpl-b") + "curl -s http://127.0.0.1:9464/metrics");
  std::string key = "dualpath_connections_handed_over_total{path=\"" + path + "\"} ";
  auto at = m.out.find(key);
  return at == std::string::npos ? 0 : std::stoull(m.out.substr(at + key.size()));
}

TEST_F(Separate, AServerBoundToOneRailsAddressAcceptsWhatIsPlacedOnTheOther) {
  constexpr uint64_t kBytes = 2 << 20;
  // param-sync prefers rail1; b's server listens on its rail0 address only
  struct Case {
    int family;
    const char* dst;
    const char* a_rail0;
    const char* a_rail1;
    uint16_t port;
    std::string connect_to;  // "": dst
  };
  const Case cases[] = {
      {AF_INET, kB4[0], "10.10.1.1", "10.20.1.1", 52031, ""},
      {AF_INET6, kB6[0], "fd10:0:1::1", "fd20:0:1::1", 52032, ""},
      // dual-stack sockets at both ends: the server bound to ::ffff:10.10.2.2
      // and the client connecting to that
      {kMapped, kB4[0], "10.10.1.1", "10.20.1.1", 52033, std::string("::ffff:") + kB4[0]}};
  for (const auto& c : cases) {
    uint64_t handed = handovers_on_b("rail1");
    BoundServer server("rail0", c.family, c.port);
    ASSERT_EQ(server.error_, "");
    ASSERT_EQ(server.bound_, c.dst);
    RailBytes before = rail_bytes();
    Sent s = tcp_send(c.connect_to.empty() ? c.dst : c.connect_to, c.port, kBytes);
    server.join();
    ASSERT_EQ(s.error, "") << c.dst << ": the connection placed on rail1 was refused";
    ASSERT_EQ(server.error_, "");
    EXPECT_TRUE(server.accepted_);
    EXPECT_EQ(server.received_, kBytes);
    EXPECT_EQ(s.local, c.a_rail1) << "the connection lives on rail1";
    EXPECT_EQ(s.peer, c.dst) << "the client sees the address it connected to";
    EXPECT_EQ(server.local_, c.dst) << "the server sees the address it bound";
    EXPECT_EQ(server.peer_, c.a_rail0) << "and its peer on the rail it listens on";
    expect_both_ways_on(1, before, kBytes, std::string("param-sync to a server bound to ") + c.dst);
    EXPECT_EQ(handovers_on_b("rail1"), handed + 1);
  }
}

TEST_F(Separate, AListenerOnTheAddressAskedForIsNeverOverridden) {
  // b listens on port 52041 on both rails' addresses: the connection placed
  // on rail1 reaches the rail1 listener, and nothing is handed over
  uint64_t handed = handovers_on_b("rail1");
  BoundServer on0("rail0", AF_INET, 52041), on1("rail1", AF_INET, 52041);
  ASSERT_EQ(on0.error_, "");
  ASSERT_EQ(on1.error_, "");
  Sent s = tcp_send(kB4[0], 52041, 4096);
  on0.join();
  on1.join();
  ASSERT_EQ(s.error, "");
  EXPECT_TRUE(on1.accepted_) << "the listener bound to the address the SYN was for";
  EXPECT_FALSE(on0.accepted_);
  EXPECT_EQ(on1.received_, 4096u);
  EXPECT_EQ(handovers_on_b("rail1"), handed);
  // with no listener on either address, the connection is refused as before
  Sent refused = tcp_send(kB4[0], 52042, 1);
  EXPECT_NE(refused.error.find("refused"), std::string::npos) << refused.error;
}

// Listeners that began before b's dualpathd attached its datapath (a first
// install, a restart after dualpathd --cleanup): no hook saw their listen(),
// so the daemon's TCP iterator finds them. b listens on both rails'
// addresses; the connection placed on rail1 reaches the rail1 listener, as
// it would have without dualpath, and is not handed to the rail0 one.
TEST_F(Separate, ListenersFromBeforeTheDaemonStartedAreNeverOverridden) {
  constexpr uint16_t kPort = 52043;
  must(dp_lab() + " stop b");
  int l[2] = {-1, -1};
  std::string err = in_netns("dpl-b", [&]() -> std::string {
    for (int r = 0; r < 2; ++r) {
      std::string bound, e;
      l[r] = bind_on(r ? "rail1" : "rail0", AF_INET, kPort, SOCK_STREAM, &bound, &e);
      if (l[r] < 0) return e;
      if (::listen(l[r], 8) != 0) return "listen on " + bound + ": " + std::strerror(errno);
    }
    return "";
  });
  // started again whatever happened, so that the suite goes on
  must(dp_lab() + " start b");
  ASSERT_EQ(err, "");
  uint64_t handed = handovers_on_b("rail1");
  auto sending = std::async(std::launch::async, [] { return tcp_send(kB4[0], kPort, 4096); });
  pollfd p[2] = {{l[0], POLLIN, 0}, {l[1], POLLIN, 0}};
  int ready = ::poll(p, 2, 3000);
  // the client waits for its peer to close: every connection accepted is
  // closed, and the listeners with it
  for (int r = 0; r < 2; ++r)
    if (p[r].revents & POLLIN) ::close(::accept(l[r], nullptr, nullptr));
  for (int fd : l) ::close(fd);
  Sent s = sending.get();
  ASSERT_EQ(s.error, "");
  EXPECT_EQ(s.local, "10.20.1.1") << "placed on rail1";
  ASSERT_GT(ready, 0) << "neither listener got the connection";
  EXPECT_TRUE(p[1].revents & POLLIN) << "the listener bound to the address the SYN was for";
  EXPECT_FALSE(p[0].revents & POLLIN) << "handed to the rail0 listener instead";
  EXPECT_EQ(handovers_on_b("rail1"), handed);
}

TEST_F(Separate, AListenerGroupOnOneRailsAddressStillAcceptsWhenOneOfItsListenersCloses) {
  // two SO_REUSEPORT listeners on b's rail0 address (nginx's or gunicorn's
  // workers); the one that began listening last closes (a worker restarts),
  // and a connection placed on rail1 still reaches the one left
  constexpr uint16_t kPort = 52055;
  int group[2] = {-1, -1};
  std::string err = in_netns("dpl-b", [&]() -> std::string {
    for (int& fd : group) {
      sockaddr_storage addr{};
      socklen_t len = if_addr("rail0", AF_INET, kPort, &addr);
      int one = 1;
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 || !len ||
          ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 8) != 0)
        return std::string("listen on rail0: ") + std::strerror(errno);
    }
    return "";
  });
  ASSERT_EQ(err, "");
  ::close(group[1]);
  std::string local;
  int client = -1;
  err = in_netns("dpl-a", [&]() -> std::string {
    socklen_t len;
    auto to = make_addr(kB4[0], kPort, &len);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(client, reinterpret_cast<sockaddr*>(&to), len) != 0)
      return std::string("connect: ") + std::strerror(errno);
    sockaddr_storage me{};
    socklen_t ml = sizeof(me);
    getsockname(client, reinterpret_cast<sockaddr*>(&me), &ml);
    local = ip_of(me);
    return "";
  });
  sockaddr_storage peer{};
  socklen_t pl = sizeof(peer);
  int accepted = ::accept(group[0], reinterpret_cast<sockaddr*>(&peer), &pl);
  ::close(group[0]);
  ::close(client);
  EXPECT_EQ(err, "");
  EXPECT_EQ(local, "10.20.1.1") << "placed on rail1";
  ASSERT_GE(accepted, 0) << "the listener left: " << std::strerror(errno);
  EXPECT_EQ(ip_of(peer), "10.10.1.1") << "the peer on the listener's rail";
  ::close(accepted);
}

TEST_F(Separate, AServerBoundToOneRailsDeviceIsRefusedAtOnceOnTheOther) {
  // SO_BINDTODEVICE (iperf3 --bind-dev, socat's so-bindtodevice): such a
  // server answers only through rail0, which rail1's network is not on. A
  // connection placed on rail1 is refused at once rather than handed over
  // to wait for a SYN-ACK that never leaves.
  struct Case {
    const char* what;
    bool on_address;  // bound to rail0's address too, else to every address
    uint16_t port;
  };
  for (const Case& c : {Case{"rail0's device and address", true, 52051},
                        Case{"rail0's device, every address", false, 52052}}) {
    int listener = -1;
    std::string err = in_netns("dpl-b", [&]() -> std::string {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      const char dev[] = "rail0";
      sockaddr_storage addr{};
      socklen_t len = 0;
      if (c.on_address)
        len = if_addr("rail0", AF_INET, c.port, &addr);
      else
        addr = make_addr("0.0.0.0", c.port, &len);
      if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, dev, sizeof(dev)) != 0 || !len ||
          ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 8) != 0) {
        std::string e = std::strerror(errno);
        ::close(fd);
        return "listen on rail0: " + e;
      }
      listener = fd;
      return "";
    });
    ASSERT_EQ(err, "") << c.what;
    int got = 0;
    err = in_netns("dpl-a", [&]() -> std::string {
      socklen_t len;
      auto to = make_addr(kB4[0], c.port, &len);
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      timeval tv{3, 0};  // a handed-over SYN would wait; fail the test, not hang it
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      got = ::connect(fd, reinterpret_cast<sockaddr*>(&to), len) == 0 ? 0 : errno;
      ::close(fd);
      return "";
    });
    ::close(listener);
    EXPECT_EQ(got, ECONNREFUSED) << c.what << ": " << std::strerror(got);
  }
}

// A UDP server in dpl-b bound to interface `ifname`'s address, as
// BoundServer is ("*": the unspecified address), with SO_REUSEADDR: it echoes
// every datagram back with sendto() to the address recvfrom() gave, and says
// which peer it saw last and how many came.
class BoundEcho {
 public:
  // connect_first: the server connects its socket to the first peer it
  // hears from and answers on it alone, having bound a second socket beside
  // it and closed that one (iperf3's UDP server does both). The first
  // datagram may come right after the bind: nothing waits for the daemon.
  BoundEcho(const std::string& ifname, int family, uint16_t port, bool connect_first = false) {
    std::atomic<bool> ready{false};
    thread_ = std::thread([this, ifname, family, port, connect_first, &ready] {
      error_ = in_netns("dpl-b", [&]() -> std::string {
        std::string err;
        int fd = bind_on(ifname, family, port, SOCK_DGRAM, &bound_, &err);
        ready = true;
        if (fd < 0) return err;
        timeval tv{0, 50000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char buf[2048];
        bool connected = false;
        while (!stop_) {
          sockaddr_storage from{};
          socklen_t fl = sizeof(from);
          ssize_t n = ::recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
          if (n <= 0) continue;
          ++received_;
          peer_ = ip_of(from);
          if (connect_first && !connected) {
            if (::connect(fd, reinterpret_cast<sockaddr*>(&from), fl) != 0) {
              err = std::string("connect: ") + std::strerror(errno);
              break;
            }
            sockaddr_storage to{};
            socklen_t tl = sizeof(to);
            getpeername(fd, reinterpret_cast<sockaddr*>(&to), &tl);
            connected_to_ = ip_of(to);
            std::string again;
            int beside = bind_on(ifname, family, port, SOCK_DGRAM, &again, &err);
            if (beside < 0) break;
            ::close(beside);
            connected = true;
          }
          if (connected)
            (void)::send(fd, buf, static_cast<size_t>(n), 0);
          else
            (void)::sendto(fd, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from),
                           fl);
        }
        ::close(fd);
        return err;
      });
    });
    while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~BoundEcho() { join(); }
  void join() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::string error_, bound_, peer_, connected_to_;
  std::atomic<int> received_{0};

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct UdpExchange {
  std::string error, peer, local;
  int echoed = 0;
  bool first_echoed = false;  // the first datagram's echo came back
  int dscp = -1;              // of the last echo (IP_RECVTOS, IPV6_RECVTCLASS)
};

// `count` datagrams of 1,000 bytes from dpl-a to dst:port, each waiting for
// its echo; `connected`: through connect() and send()/recv(), else sendto()
// and recvfrom(). peer: what getpeername() (connected) or the last
// recvfrom() gave; local: getsockname() of the connected socket.
UdpExchange udp_exchange(const std::string& dst, uint16_t port, int count, bool connected) {
  UdpExchange out;
  out.error = in_netns("dpl-a", [&]() -> std::string {
    socklen_t len;
    auto to = make_addr(dst, port, &len);
    int fd = ::socket(to.ss_family, SOCK_DGRAM, 0);
    timeval tv{0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1;
    if (to.ss_family == AF_INET6)
      setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
    else
      setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
    if (connected && ::connect(fd, reinterpret_cast<sockaddr*>(&to), len) != 0) {
      std::string e = std::strerror(errno);
      ::close(fd);
      return "connect: " + e;
    }
    std::vector<char> buf(1000, 'u');
    for (int i = 0; i < count; ++i) {
      if (connected)
        (void)::send(fd, buf.data(), buf.size(), 0);
      else
        (void)::sendto(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&to), len);
      sockaddr_storage from{};
      iovec iov{buf.data(), buf.size()};
      alignas(cmsghdr) char control[64];
      msghdr m{};
      m.msg_name = &from;
      m.msg_namelen = sizeof(from);
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = control;
      m.msg_controllen = sizeof(control);
      if (::recvmsg(fd, &m, 0) <= 0) continue;
      ++out.echoed;
      out.first_echoed |= i == 0;
      if (!connected) out.peer = ip_of(from);
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
          out.dscp = *reinterpret_cast<uint8_t*>(CMSG_DATA(c)) >> 2;
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
          int tclass;
          std::memcpy(&tclass, CMSG_DATA(c), sizeof(tclass));
          out.dscp = tclass >> 2;
        }
      }
    }
    if (connected) {
      sockaddr_storage peer{}, me{};
      socklen_t pl = sizeof(peer), ml = sizeof(me);
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl);
      getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml);
      out.peer = ip_of(peer);
      out.local = ip_of(me);
    }
    ::close(fd);
    return "";
  });
  return out;
}

TEST_F(Separate, AUdpServerBoundToOneRailsAddressAnswersWhatIsPlacedOnTheOther) {
  // logs prefers rail1; b's server is bound to its rail0 address only, and a
  // connected client takes replies only from the address it is connected to.
  // The client's first datagram follows the server's bind at once, as in
  // iperf3's UDP test (the daemon has not looked for the server yet).
  struct Case {
    int family;
    const char* dst;
    const char* a_rail0;
    const char* a_rail1;
    uint16_t port;
    bool connected;
    bool server_connects;  // the server connect()s to its first peer (iperf3's)
  };
  const Case cases[] = {{AF_INET, kB4[0], "10.10.1.1", "10.20.1.1", 54021, true, false},
                        {AF_INET, kB4[0], "10.10.1.1", "10.20.1.1", 54022, false, false},
                        {AF_INET6, kB6[0], "fd10:0:1::1", "fd20:0:1::1", 54023, true, false},
                        {AF_INET6, kB6[0], "fd10:0:1::1", "fd20:0:1::1", 54024, false, false},
                        // a dual-stack server bound to ::ffff:10.10.2.2 (Java's)
                        {kMapped, kB4[0], "10.10.1.1", "10.20.1.1", 54025, false, false},
                        {AF_INET, kB4[0], "10.10.1.1", "10.20.1.1", 54026, true, true},
                        {AF_INET6, kB6[0], "fd10:0:1::1", "fd20:0:1::1", 54027, true, true},
                        {kMapped, kB4[0], "10.10.1.1", "10.20.1.1", 54028, true, true}};
  constexpr int kCount = 200;
  for (const auto& c : cases) {
    const std::string what = std::string(c.connected ? "connected" : "unconnected") +
                             " UDP to a server bound to " + c.dst +
                             (c.server_connects ? " that connects to its peer" : "") +
                             (c.family == kMapped ? " (dual-stack)" : "");
    uint64_t handed = handovers_on_b("rail1");
    RailBytes before = rail_bytes();
    BoundEcho echo("rail0", c.family, c.port, c.server_connects);
    ASSERT_EQ(echo.bound_, c.dst) << echo.error_;
    UdpExchange u = udp_exchange(c.dst, c.port, kCount, c.connected);
    echo.join();
    ASSERT_EQ(u.error, "") << what;
    ASSERT_EQ(echo.error_, "") << what;
    EXPECT_TRUE(u.first_echoed) << what << ": the first datagram, right after the bind";
    EXPECT_GE(u.echoed, kCount - 5) << what << ": " << echo.received_ << " reached the server";
    EXPECT_EQ(u.peer, c.dst) << what << ": the client sees the address it sent to";
    if (c.connected) {
      EXPECT_EQ(u.local, c.a_rail1) << what << ": it lives on rail1";
    }
    EXPECT_EQ(echo.peer_, c.a_rail0) << what << ": the server sees its peer on its own rail";
    // the server's replies are the class's: its DSCP (CS1), and in b's flow
    // table on rail1, from the address they leave with
    EXPECT_EQ(u.dscp, 8) << what << ": the echo's DSCP";
    bool listed = false;
    json flows = lab::dpctl("b", "flow list --class logs --top 100")["flows"];
    const std::string b_rail1 = c.family == AF_INET6 ? kB6[1] : kB4[1];
    for (auto& f : flows)
      listed |= f["proto"] == "udp" && f["sport"] == c.port && f["src"] == b_rail1 &&
                f["path"] == "rail1";
    EXPECT_TRUE(listed) << what << ": the replies in b's flow table\n" << flows.dump();
    if (c.server_connects) {
      EXPECT_EQ(echo.connected_to_, c.a_rail0) << what << ": getpeername() of the server";
    }
    expect_both_ways_on(1, before, kCount * 1000, what);
    EXPECT_EQ(handovers_on_b("rail1"), handed + 1) << what << ": one handover per peer";
  }
  // a socket bound to the address asked for gets its datagrams, even one
  // the daemon has not seen yet (it is found from its bind on)
  BoundEcho on0("rail0", AF_INET, 54031), on1("rail1", AF_INET, 54031);
  ASSERT_EQ(on0.error_, "");
  ASSERT_EQ(on1.error_, "");
  uint64_t handed = handovers_on_b("rail1");
  UdpExchange u = udp_exchange(kB4[0], 54031, 20, true);
  on0.join();
  on1.join();
  EXPECT_EQ(u.echoed, 20);
  EXPECT_EQ(on1.received_, 20) << "the socket bound to the address the datagrams were for";
  EXPECT_EQ(on0.received_, 0);
  EXPECT_EQ(handovers_on_b("rail1"), handed);
  // and one bound to every address takes them too, rail0's socket beside it
  BoundEcho on0_again("rail0", AF_INET, 54032), any("*", AF_INET, 54032);
  ASSERT_EQ(on0_again.error_, "");
  ASSERT_EQ(any.error_, "");
  u = udp_exchange(kB4[0], 54032, 20, true);
  on0_again.join();
  any.join();
  EXPECT_EQ(u.echoed, 20);
  EXPECT_EQ(any.received_, 20) << "the socket bound to every address";
  EXPECT_EQ(on0_again.received_, 0);
  EXPECT_EQ(handovers_on_b("rail1"), handed);
}

// In the separate topology a connection stays where it was made, so a
// decision is carried by the connections made after it. One stream of
// param-sync (elastic, prefers rail1 at 250 Mbit/s) fills rail1 and the
// scheduler spills the class to rail0; eight connections made then lean
// toward the rail that carried less than its decided share, and the rails
// carry about the decided shares. Without that lean (by count alone) two of
// the eight would join the stream on rail1.
TEST_F(Separate, ConnectionsMadeAfterASpillCarryItsDecision) {
  if (lab::sh("command -v iperf3").rc != 0) GTEST_SKIP() << "iperf3 is not installed";
  const std::string file = lab::g_policies + "/lab-sep-a.toml";
  const std::string static_policy = lab::read_file(file);
  lab::write_file(file, std::regex_replace(static_policy, std::regex("mode = \"static\""),
                                           "mode = \"adaptive\""));
  json rl = lab::dpctl("a", "policy reload");
  ASSERT_TRUE(rl.contains("hash")) << rl.dump();
  lab::dpctl("a", "class unpin param-sync");  // whatever earlier tests did
  const uint64_t since = lab::dpctl("a", "events")["last"].get<uint64_t>();
  pid_t s1 = lab::spawn_in_ns("dpl-b", {"iperf3", "-s", "-1", "-p", "52100"},
                              g_policies + "/iperf-s1.log");
  pid_t s2 = lab::spawn_in_ns("dpl-b", {"iperf3", "-s", "-1", "-p", "52101"},
                              g_policies + "/iperf-s2.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pid_t one = lab::spawn_in_ns("dpl-a", {"iperf3", "-c", kB4[0], "-p", "52100", "-t", "14"},
                               g_policies + "/iperf-c1.log");
  json spill;
  for (int i = 0; i < 60 && spill.is_null(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    json reply = lab::dpctl("a", "events --since " + std::to_string(since));
    for (auto& e : reply["events"])
      if (e["class"] == "param-sync" && e["kind"] == "spill") spill = e;
  }
  pid_t eight = -1;
  json c;
  // a spill grows in steps a tick or two apart (6%, then 41%, ... 100%):
  // connections made at its first step would carry that step's share and
  // keep it (established connections stay), so they are made once the
  // decision has held for 300 ms
  double settled = -1;
  for (int i = 0, same = 0; !spill.is_null() && i < 30 && same < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    json d = klass("a", "param-sync")["decided_shares"];
    double now = d.is_object() ? d.value("rail0", -1.0) : -1.0;
    same = now == settled ? same + 1 : 0;
    settled = now;
  }
  json placed_before;
  if (!spill.is_null()) {
    placed_before = klass("a", "param-sync")["connections_by_path"];
    eight =
        lab::spawn_in_ns("dpl-a", {"iperf3", "-c", kB4[0], "-p", "52101", "-P", "8", "-t", "10"},
                         g_policies + "/iperf-c8.log");
    for (int i = 0; i < 80; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c = klass("a", "param-sync");
      if (c["carried_shares"].is_object() && c["carried_seconds"].get<double>() >= 4) break;
    }
  }
  json events = lab::dpctl("a", "events --since " + std::to_string(since));
  if (eight > 0) lab::stop_child(eight);
  lab::stop_child(one);
  lab::stop_child(s2);
  lab::stop_child(s1);
  lab::write_file(file, static_policy);
  lab::dpctl("a", "policy reload");

  ASSERT_FALSE(spill.is_null()) << "no spill: " << events.dump();
  ASSERT_TRUE(c["carried_shares"].is_object()) << c.dump() << events.dump();
  const double decided = c["decided_shares"]["rail0"].get<double>();
  const double carried = c["carried_shares"]["rail0"].get<double>();
  // the connections made after the spill: placed on each rail as the
  // decision said when they were made (the first stream, made before it,
  // stays on rail1: its bytes are in what the class carried, not in this)
  auto placed = [&](const char* rail) {
    return c["connections_by_path"].value(rail, uint64_t{0}) -
           placed_before.value(rail, uint64_t{0});
  };
  const uint64_t on0 = placed("rail0"), on1 = placed("rail1");
  const double placed0 =
      100.0 * static_cast<double>(on0) / static_cast<double>(std::max<uint64_t>(1, on0 + on1));
  std::printf(
      "    separate topology: param-sync rail0 decided %.0f%% (%.0f%% when the new connections "
      "were made), %lu of %lu new connections placed there; the class carried %.1f%% there over "
      "%.1f s, its first stream staying on rail1\n",
      decided, settled, static_cast<unsigned long>(on0), static_cast<unsigned long>(on0 + on1),
      carried, c["carried_seconds"].get<double>());
  EXPECT_GT(settled, 0) << c.dump();
  EXPECT_GE(on0 + on1, 8u) << "iperf3 -P 8's connections were not all placed: " << c.dump();
  EXPECT_NEAR(placed0, settled, 15) << c.dump() << events.dump();
}

TEST_F(Separate, MetricsCountPlacementsAndResets) {
  auto m = sh(nsenter("dpl-a") + "curl -s http://127.0.0.1:9464/metrics");
  EXPECT_NE(m.out.find("dualpath_connections_placed_total{class=\"param-sync\",path=\"rail1\"}"),
            std::string::npos);
  EXPECT_NE(m.out.find("dualpath_connections_unmapped_total{class=\"logs\"} 5"), std::string::npos);
  EXPECT_NE(m.out.find("dualpath_connections_reset_total"), std::string::npos);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto* env = new lab::Env;
  env->topology = "separate";
  // a multipath class on both nodes, matched by a cgroup the tests' children
  // join; hold-downs and ramps short enough that a failed or suspected rail is
  // back for the next test
  std::filesystem::create_directories(lab::cgroup2_mount() + kCollective);
  // a peer table on a: b's spare addresses (APeerTableFindsAPeerNumberedApart...)
  env->edit = [](const std::string& text) {
    bool a = text.find("name = \"dpl-a\"") != std::string::npos;
    return std::regex_replace(text, std::regex("holddown = \"5m\""),
                              "holddown = \"3s\"\nramp_interval = \"100ms\"") +
           "\n[[class]]\nname = \"collective\"\nkind = \"elastic\"\npriority = 4\n"
           "prefer = \"rail0\"\nmultipath = true\ncgroups = [\"/dpl-collective\"]\n"
           "\n[[class]]\nname = \"mp-port\"\nkind = \"latency_sensitive\"\npriority = 4\n"
           "prefer = \"rail1\"\nmultipath = true\nports = [\"tcp:61200-61209\"]\n" +
           (a ? "\n[[peer]]\nname = \"b-spare\"\n"
                "addresses = { rail0 = \"10.10.2.50\", rail1 = \"10.20.2.77\" }\n"
              : "");
  };
  ::testing::AddGlobalTestEnvironment(env);
  int rc = RUN_ALL_TESTS();
  std::error_code ec;
  std::filesystem::remove(lab::cgroup2_mount() + kCollective, ec);  // empty once the children exit
  return rc;
}
