// SPDX-License-Identifier: Apache-2.0
// The probe protocol (dualpath/client/probe.h) and the daemon's responder
// (daemon/responder.cpp) on loopback: requests, limits and refusals.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "dualpath/client/probe.h"
#include "responder.h"

namespace {

using namespace std::chrono_literals;
namespace probe = dp::probe;

TEST(ProbeProtocol, RequestsAreCheckedBeforeAnythingIsDone) {
  auto ok = probe::parse_request(R"({"op":"echo","size":128})");
  ASSERT_TRUE(ok) << ok.error().what();
  EXPECT_EQ(ok->op, "echo");
  EXPECT_EQ(ok->size, 128);
  EXPECT_TRUE(probe::parse_request(R"({"op":"source","seconds":0.5})"));
  for (const char* bad :
       {"", "[]", "{}", R"({"op":1})", R"({"op":"flood"})", R"({"op":"echo","size":0})",
        R"({"op":"echo","size":65537})", R"({"op":"echo","size":1.5})",
        R"({"op":"source","seconds":-1})", R"({"op":"source","seconds":"1"})", "{\"op\":\"hello\""})
    EXPECT_FALSE(probe::parse_request(bad)) << bad;
}

TEST(ProbeProtocol, PercentilesAreNearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  auto p = probe::percentiles(v);
  EXPECT_EQ(p.n, 100u);
  EXPECT_EQ(p.p50, 50);
  EXPECT_EQ(p.p95, 95);
  EXPECT_EQ(p.p99, 99);
  EXPECT_EQ(p.min, 1);
  EXPECT_EQ(p.max, 100);
  EXPECT_EQ(probe::percentiles({7}).p99, 7);
  EXPECT_EQ(probe::percentiles({}).n, 0u);
}

// A one-rail policy on loopback; the responder listens on 127.0.0.1:port.
dp::Policy loopback_policy(uint16_t port, const std::string& allow, int sessions = 4) {
  std::string text = R"([node]
name = "probe-test"
[[path]]
name = "lo0"
interface = "lo"
gateway = "127.0.0.1"
source = "127.0.0.1"
capacity = "1Gbit"
table = 190
fwmark = 0x190
[[class]]
name = "c"
kind = "elastic"
prefer = "lo0"
ports = ["tcp:1-2"]
[responder]
port = )" + std::to_string(port) +
                     "\nmax_sessions = " + std::to_string(sessions) +
                     "\nmax_duration = \"2s\"\nallow = [\"" + allow + "\"]\n";
  auto load = dp::parse_policy(text, "probe.toml");
  EXPECT_TRUE(load.ok()) << (load.errors.empty() ? "" : load.errors.front().str());
  return *load.policy;
}

class Responder : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the responder marks its sockets (CAP_NET_ADMIN)";
  }
  // A port free now (the kernel picks it), for the responder to take.
  static uint16_t free_port() {
    dp::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
    auto sa = dp::sockaddr_of(*dp::IpAddr::parse("127.0.0.1"), 0);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa.ss), sa.len), 0);
    socklen_t len = sa.len;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa.ss), &len);
    return ntohs(reinterpret_cast<sockaddr_in*>(&sa.ss)->sin_port);
  }
  probe::Target target(uint16_t port) { return {*dp::IpAddr::parse("127.0.0.1"), port, {}, 0}; }
};

TEST_F(Responder, AnswersHelloEchoSinkAndSource) {
  uint16_t port = free_port();
  dp::Responder r;
  ASSERT_TRUE(r.start(loopback_policy(port, "127.0.0.0/8")));
  auto t = target(port);
  auto h = probe::hello(t, 2000ms);
  ASSERT_TRUE(h) << h.error().what();
  EXPECT_EQ((*h)["node"], "probe-test");
  EXPECT_EQ((*h)["topology"], "shared");
  ASSERT_EQ((*h)["paths"].size(), 1u);
  EXPECT_EQ((*h)["paths"][0]["port"], port);
  EXPECT_GT((*h)["paths"][0]["mtu"].get<int>(), 0);

  auto e = probe::echo(t, 20, 100, 0ms);
  ASSERT_TRUE(e) << e.error().what();
  EXPECT_EQ(e->us.size(), 20u);

  auto c = probe::connects(t, 5, 1000ms);
  EXPECT_EQ(c.ms.size(), 5u);
  EXPECT_EQ(c.lost + c.refused, 0);

  // the UDP echo on the same address and port
  EXPECT_EQ((*h)["udp_echo"], true);
  auto u = probe::udp_echoes(t, 3, 1000ms);
  EXPECT_EQ(u.answered, 3) << u.error;
  EXPECT_EQ(r.status()["udp_echoed"], 3);

  for (bool up : {true, false}) {
    auto bps = probe::throughput(t, up, 2, 0.2);
    ASSERT_TRUE(bps) << bps.error().what();
    EXPECT_GT(*bps, 0) << (up ? "sink" : "source");
  }
  // hello, echo and four streams at least (a connect-only probe that finds
  // every session taken is counted busy: nothing is served to it)
  EXPECT_GE(r.status()["served"].get<int>(), 6);
}

TEST_F(Responder, RefusesAddressesItDoesNotServeAndBadRequests) {
  uint16_t port = free_port();
  dp::Responder r;
  ASSERT_TRUE(r.start(loopback_policy(port, "192.0.2.0/24")));
  auto h = probe::hello(target(port), 1000ms);
  EXPECT_FALSE(h) << "127.0.0.1 is not allowed";
  EXPECT_EQ(r.status()["refused_address"], 1);
  auto u = probe::udp_echoes(target(port), 2, 200ms);
  EXPECT_EQ(u.answered, 0);
  EXPECT_EQ(u.lost, 2);
  EXPECT_EQ(r.status()["refused_address"], 3);
  EXPECT_EQ(r.status()["udp_echoed"], 0);

  ASSERT_TRUE(r.start(loopback_policy(port, "127.0.0.0/8")));
  auto c = probe::connect_to(target(port), 1000ms);
  ASSERT_TRUE(c);
  auto reply = probe::exchange(*c, {{"op", "flood"}}, 1000ms);
  ASSERT_FALSE(reply);
  EXPECT_NE(reply.error().message.find("unknown op"), std::string::npos) << reply.error().what();
  EXPECT_EQ(r.status()["bad_requests"], 1);
}

TEST_F(Responder, KeepsToItsSessionLimitAndItsTimeLimit) {
  uint16_t port = free_port();
  dp::Responder r;
  ASSERT_TRUE(r.start(loopback_policy(port, "127.0.0.0/8", 1)));
  auto t = target(port);
  {
    auto first = probe::open_session(t, {{"op", "echo"}, {"size", 8}}, 1000ms);
    ASSERT_TRUE(first) << first.error().what();
    // the only session is taken: a second is told "busy" (and gives up after its timeout)
    auto second = probe::open_session(t, {{"op", "hello"}}, 200ms);
    ASSERT_FALSE(second);
    EXPECT_NE(second.error().message.find("busy"), std::string::npos) << second.error().what();
    EXPECT_EQ(second.error().code, EAGAIN) << "a refusal that passes says so";
    EXPECT_GE(r.status()["refused_busy"].get<int>(), 1);
  }  // the echo session ends
  std::this_thread::sleep_for(100ms);
  // a source asked for 30 s ends at max_duration (2 s)
  auto start = std::chrono::steady_clock::now();
  auto bps = probe::throughput(t, false, 1, 30);
  ASSERT_TRUE(bps) << bps.error().what();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 6s);
  r.stop();
  EXPECT_FALSE(probe::hello(t, 500ms)) << "stopped: nothing listens";
}

TEST_F(Responder, AFloodFromOneAddressIsCutToItsRateAndOthersAreStillAnswered) {
  uint16_t port = free_port();
  dp::Responder r;
  ASSERT_TRUE(r.start(loopback_policy(port, "127.0.0.0/8", 64)));
  auto flooder = target(port);
  flooder.source = *dp::IpAddr::parse("127.0.0.3");
  // what a source may have in `secs`: the burst and the rate since
  auto most = [](double burst, double rate, double secs) {
    return static_cast<int>(burst + secs * rate) + 1;
  };
  // twice the burst of echoes, as fast as answers come (on a loaded
  // machine an answer may come after its 20 ms: counted lost, not refused)
  int n = 2 * static_cast<int>(dp::Responder::kEchoBurst);
  auto start = std::chrono::steady_clock::now();
  auto u = probe::udp_echoes(flooder, n, 20ms);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int echo_most = most(dp::Responder::kEchoBurst, dp::Responder::kEchoesPerSecond, secs);
  EXPECT_LE(u.answered, echo_most) << "in " << secs << " s";
  EXPECT_GT(u.answered, 0);
  const int refused = r.status()["refused_rate"].get<int>();
  EXPECT_GE(refused, n - echo_most) << "what is past the rate is refused and counted";
  EXPECT_LE(refused + u.answered, n);
  // sessions: twice the burst, each a hello asked once (probe::hello asks
  // again after a refusal for its rate, as a client should)
  int n_sessions = 2 * static_cast<int>(dp::Responder::kSessionBurst), refused_sessions = 0;
  std::string why;
  int why_code = 0;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < n_sessions; ++i) {
    auto c = probe::connect_to(flooder, 1000ms);
    ASSERT_TRUE(c) << c.error().what();
    auto h = probe::exchange(*c, {{"op", "hello"}}, 1000ms);
    if (!h) {
      ++refused_sessions;
      why = h.error().message;
      why_code = h.error().code;
    }
  }
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int session_most =
      most(dp::Responder::kSessionBurst, dp::Responder::kSessionsPerSecond, secs);
  EXPECT_LE(n_sessions - refused_sessions, session_most) << "in " << secs << " s";
  if (n_sessions > session_most) {
    EXPECT_NE(why.find("rate"), std::string::npos) << why;
    EXPECT_EQ(why_code, EAGAIN) << "a refusal that passes says so";
  }
  EXPECT_EQ(r.status()["refused_rate"].get<int>(), refused + refused_sessions);
  // another address has its own budget
  auto other = target(port);
  other.source = *dp::IpAddr::parse("127.0.0.4");
  EXPECT_EQ(probe::udp_echoes(other, 3, 1000ms).answered, 3);
  auto h = probe::hello(other, 1000ms);
  EXPECT_TRUE(h) << h.error().what();
  // and the flooder, asking again as probe::hello does, gets its session
  // once its bucket has a token (1/64 s)
  auto again = probe::hello(flooder, 1000ms);
  EXPECT_TRUE(again) << again.error().what();
}

}  // namespace
