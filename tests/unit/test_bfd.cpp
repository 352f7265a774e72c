// SPDX-License-Identifier: Apache-2.0
// BFD codec and state machine against RFC 5880.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "dualpath/core/bfd.h"
#include "path_monitor.h"

namespace dp::bfd {
namespace {

using namespace std::chrono_literals;

Packet sample() {
  Packet p;
  p.diag = Diag::TimeExpired;
  p.state = State::Init;
  p.detect_mult = 3;
  p.my_disc = 0x11223344;
  p.your_disc = 0x55667788;
  p.desired_min_tx_us = 500000;
  p.required_min_rx_us = 300000;
  return p;
}

TEST(BfdCodec, EncodesTheWireLayoutOfSection4_1) {
  auto b = encode(sample());
  EXPECT_EQ(b[0], 0x21);  // version 1, diag 1
  EXPECT_EQ(b[1], 0x80);  // state Init (2) << 6
  EXPECT_EQ(b[2], 3);
  EXPECT_EQ(b[3], 24);
  EXPECT_EQ(b[4], 0x11);
  EXPECT_EQ(b[11], 0x88);
  EXPECT_EQ(b[12] << 24 | b[13] << 16 | b[14] << 8 | b[15], 500000);
  Packet p = sample();
  p.poll = true;
  EXPECT_EQ(encode(p)[1], 0xa0);
}

TEST(BfdCodec, RoundTrips) {
  auto b = encode(sample());
  auto p = decode(b);
  ASSERT_TRUE(p.ok()) << p.error().what();
  EXPECT_EQ(p->state, State::Init);
  EXPECT_EQ(p->diag, Diag::TimeExpired);
  EXPECT_EQ(p->my_disc, 0x11223344u);
  EXPECT_EQ(p->your_disc, 0x55667788u);
  EXPECT_EQ(p->required_min_rx_us, 300000u);
}

// Every discard rule of RFC 5880 6.8.6 that a packet alone decides.
struct Malformed {
  const char* rule;
  void (*mutate)(std::vector<uint8_t>&);
  const char* expect;
};

TEST(BfdCodec, DiscardsEveryMalformedPacketOfSection6_8_6) {
  const Malformed cases[] = {
      {"short datagram", [](std::vector<uint8_t>& b) { b.resize(20); }, "shorter"},
      {"version 0", [](std::vector<uint8_t>& b) { b[0] = (b[0] & 0x1f); }, "version 0"},
      {"version 2", [](std::vector<uint8_t>& b) { b[0] = 0x40 | (b[0] & 0x1f); }, "version 2"},
      {"length below 24", [](std::vector<uint8_t>& b) { b[3] = 23; }, "below the minimum 24"},
      {"length below 26 with A", [](std::vector<uint8_t>& b) { b[1] |= 0x04, b[3] = 25; },
       "below the minimum 26"},
      {"length above payload", [](std::vector<uint8_t>& b) { b[3] = 48; }, "exceeds"},
      {"detect mult 0", [](std::vector<uint8_t>& b) { b[2] = 0; }, "multiplier is zero"},
      {"multipoint", [](std::vector<uint8_t>& b) { b[1] |= 0x01; }, "multipoint"},
      {"my disc 0", [](std::vector<uint8_t>& b) { b[4] = b[5] = b[6] = b[7] = 0; },
       "my discriminator is zero"},
      {"your disc 0 in Up",
       [](std::vector<uint8_t>& b) { b[8] = b[9] = b[10] = b[11] = 0, b[1] = 0xc0; },
       "your discriminator is zero in state up"},
      {"your disc 0 in Init",
       [](std::vector<uint8_t>& b) { b[8] = b[9] = b[10] = b[11] = 0, b[1] = 0x80; },
       "in state init"},
      {"A bit without authentication",
       [](std::vector<uint8_t>& b) { b[1] |= 0x04, b[3] = 24 + 4, b.resize(28); },
       "authentication"},
      {"P and F", [](std::vector<uint8_t>& b) { b[1] |= 0x30; }, "poll and final"},
  };
  for (const auto& c : cases) {
    auto a = encode(sample());
    std::vector<uint8_t> b(a.begin(), a.end());
    c.mutate(b);
    auto p = decode(b);
    ASSERT_FALSE(p.ok()) << c.rule;
    EXPECT_NE(p.error().what().find(c.expect), std::string::npos)
        << c.rule << ": " << p.error().what();
  }
  // your discriminator zero is fine while Down or AdminDown
  for (uint8_t st : {uint8_t{0x40}, uint8_t{0x00}}) {
    auto a = encode(sample());
    a[8] = a[9] = a[10] = a[11] = 0;
    a[1] = st;
    EXPECT_TRUE(decode(a).ok());
  }
}

// Two sessions wired back to back, stepping a fake clock.
struct Pair {
  Time t0 = Time{} + 1h;
  Time now = t0;
  Session a, b;
  bool cut = false;
  Auth auth;  // what both ends authenticate with (and set_auth)
  Pair(Config ca = {}, Config cb = {}) : a(ca, 1001, t0, 7), b(cb, 2002, t0, 9) {}
  void step(std::chrono::milliseconds d) {
    Time end = now + d;
    while (now < end) {
      now += 1ms;
      for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
        from->expire(now);
        if (auto p = from->transmit(now); p && !cut) {
          auto wire = encode(*p, auth);
          auto back = decode(wire, auth);
          ASSERT_TRUE(back.ok()) << back.error().what();
          to->receive(*back, now);
        }
      }
    }
  }
};

TEST(BfdSession, TwoSessionsComeUpThroughInitAndNegotiateFastTimers) {
  Pair p;
  EXPECT_EQ(p.a.state(), State::Down);
  EXPECT_EQ(p.a.tx_interval(), 1s) << "slow (1 s) while not Up, 6.8.3";
  p.step(3000ms);
  EXPECT_EQ(p.a.state(), State::Up);
  EXPECT_EQ(p.b.state(), State::Up);
  EXPECT_EQ(p.a.remote_disc(), 2002u);
  EXPECT_EQ(p.b.remote_disc(), 1001u);
  EXPECT_FALSE(p.a.poll_active()) << "the poll sequence for 500 ms ended with a Final";
  EXPECT_EQ(p.a.tx_interval(), 500ms);
  EXPECT_EQ(p.a.detection_time(), 1500ms);
  // b heard a's Down first: Down -> Init -> Up; a then heard b's Init: Down -> Up
  auto tb = p.b.take_transitions();
  ASSERT_EQ(tb.size(), 2u);
  EXPECT_EQ(tb[0].to, State::Init);
  EXPECT_EQ(tb[1].to, State::Up);
  auto ta = p.a.take_transitions();
  ASSERT_EQ(ta.size(), 1u);
  EXPECT_EQ(ta[0].to, State::Up);
}

TEST(BfdSession, DetectionTimeExpiryTakesTheSessionDown) {
  Pair p;
  p.step(3000ms);
  ASSERT_EQ(p.a.state(), State::Up);
  (void)p.a.take_transitions();
  p.cut = true;
  Time cut_at = p.now;
  p.step(1400ms);
  EXPECT_EQ(p.a.state(), State::Up) << "not before 3 x 500 ms";
  p.step(200ms);
  EXPECT_EQ(p.a.state(), State::Down);
  EXPECT_EQ(p.a.diag(), Diag::TimeExpired);
  auto tr = p.a.take_transitions();
  ASSERT_EQ(tr.size(), 1u);
  EXPECT_LE(tr[0].t - cut_at, 1500ms);
  EXPECT_GE(tr[0].t - cut_at, 1000ms) << "the last packet came up to one interval before the cut";
  EXPECT_EQ(p.a.remote_disc(), 0u) << "6.8.1: reset after a detection time without packets";
  p.cut = false;
  p.step(4000ms);
  EXPECT_EQ(p.a.state(), State::Up) << "and it comes back";
}

TEST(BfdSession, RemoteDownTakesAnUpSessionDownWithNeighborDiag) {
  Pair p;
  p.step(3000ms);
  Packet down;
  down.state = State::Down;
  down.my_disc = 2002;
  down.your_disc = 1001;
  down.desired_min_tx_us = 1000000;
  down.required_min_rx_us = 500000;
  EXPECT_FALSE(p.a.receive(down, p.now).has_value());
  EXPECT_EQ(p.a.state(), State::Down);
  EXPECT_EQ(p.a.diag(), Diag::NeighborDown);
}

// The peer's daemon killed and started again: its new session (another
// discriminator) says Down to no session of ours. The session goes down as
// 6.8.6 says and comes up again with the new one, and the transition says
// that the peer restarted, which the controller does not take for a failed
// rail. A peer whose session timed out keeps its discriminator: that Down is
// a failure.
TEST(BfdSession, ADownFromThePeersNewSessionSaysThePeerRestarted) {
  Pair p;
  p.step(3000ms);
  ASSERT_EQ(p.a.state(), State::Up);
  (void)p.a.take_transitions();
  p.b = Session(Config{}, 3003, p.now, 11);
  p.step(3000ms);
  auto tr = p.a.take_transitions();
  ASSERT_GE(tr.size(), 2u);
  EXPECT_EQ(tr[0].to, State::Down);
  EXPECT_EQ(tr[0].diag, Diag::NeighborDown);
  EXPECT_TRUE(tr[0].peer_restarted);
  EXPECT_EQ(tr.back().to, State::Up) << "and up again with the new session";
  EXPECT_EQ(p.a.remote_disc(), 3003u);

  // the same peer session, timed out (6.8.1: it forgot our discriminator)
  Packet down = sample();  // TimeExpired
  down.state = State::Down;
  down.my_disc = 3003;
  down.your_disc = 0;
  EXPECT_FALSE(p.a.receive(down, p.now).has_value());
  tr = p.a.take_transitions();
  ASSERT_EQ(tr.size(), 1u);
  EXPECT_EQ(tr[0].to, State::Down);
  EXPECT_FALSE(tr[0].peer_restarted) << "a Down from the session it was up with is a failure";
}

TEST(BfdSession, PeerAdminDownTakesItDownAndAdminDownSessionDiscards) {
  Pair p;
  p.step(3000ms);
  p.b.set_admin_down(true, p.now);
  p.step(10ms);
  EXPECT_EQ(p.a.state(), State::Down);
  EXPECT_EQ(p.a.remote_state(), State::AdminDown);
  EXPECT_EQ(p.b.diag(), Diag::AdminDown);
  Packet up;
  up.state = State::Up;
  up.my_disc = 1001;
  up.your_disc = 2002;
  EXPECT_TRUE(p.b.receive(up, p.now).has_value()) << "AdminDown discards";
  p.b.set_admin_down(false, p.now);
  p.step(4000ms);
  EXPECT_EQ(p.a.state(), State::Up);
}

TEST(BfdSession, WrongYourDiscriminatorIsDiscarded) {
  Pair p;
  Packet x;
  x.state = State::Down;
  x.my_disc = 5;
  x.your_disc = 4242;
  auto why = p.a.receive(x, p.now);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("not this session's"), std::string::npos);
  EXPECT_EQ(p.a.rx_packets(), 0u);
}

// A flood from the peer's own address (the one source the transport takes):
// after a burst, at most 4 times the rate this session asked for is looked
// at; the rest is discarded unread. (What is looked at still counts: a
// forged packet that carries the right discriminators is the peer's to the
// protocol, which authentication alone could tell apart.)
TEST(BfdSession, AFloodFromThePeerIsDiscardedBeyondFourTimesItsRate) {
  Pair p;  // required min RX 500 ms: the peer may send 2 a second
  p.step(3000ms);
  ASSERT_EQ(p.a.state(), State::Up);
  (void)p.a.take_transitions();
  const uint64_t before = p.a.rx_packets();
  Packet up;
  up.state = State::Up;
  up.my_disc = p.a.remote_disc();
  up.your_disc = p.a.local_disc();
  up.detect_mult = 3;
  up.desired_min_tx_us = up.required_min_rx_us = 500000;
  size_t discarded = 0;
  std::string why;
  for (int i = 0; i < 10000; ++i) {
    auto r = p.a.receive(up, p.now + std::chrono::microseconds(100 * i));
    if (r) {
      ++discarded;
      why = *r;
    }
  }
  // 1 s of flood: the burst (16) and 4 x 2 a second
  EXPECT_LE(p.a.rx_packets() - before, 16u + 8u + 1u);
  EXPECT_GE(discarded, 10000u - 25u);
  EXPECT_NE(why.find("more than 4 times the packets the peer may send"), std::string::npos) << why;
  EXPECT_EQ(p.a.state(), State::Up);
}

// A peer that keeps to its interval is never discarded, nor its Final.
TEST(BfdSession, APeerAtItsOwnRateIsNeverDiscarded) {
  Pair p(Config{100ms, 100ms, 3}, Config{100ms, 100ms, 3});
  p.step(3000ms);
  ASSERT_EQ(p.a.state(), State::Up);
  const uint64_t sent = p.b.tx_packets(), heard = p.a.rx_packets();
  p.step(60000ms);
  EXPECT_EQ(p.a.rx_packets() - heard, p.b.tx_packets() - sent);
  EXPECT_EQ(p.a.state(), State::Up);
}

TEST(BfdSession, APollIsAnsweredAtOnceWithFinalAndNeverBoth) {
  Pair p;
  p.step(3000ms);
  Packet poll;
  poll.state = State::Up;
  poll.poll = true;
  poll.my_disc = 2002;
  poll.your_disc = 1001;
  poll.desired_min_tx_us = 500000;
  poll.required_min_rx_us = 500000;
  p.a.receive(poll, p.now);
  EXPECT_LE(p.a.next_wakeup(), p.now);
  auto out = p.a.transmit(p.now);
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(out->final);
  EXPECT_FALSE(out->poll);
}

TEST(BfdSession, SlowerRemoteReceiverSetsTheTransmitIntervalAndDetectionUsesTheRemoteRate) {
  Config slow;
  slow.desired_min_tx = 300ms;
  slow.required_min_rx = 900ms;
  slow.detect_mult = 5;
  Pair p({}, slow);
  p.step(4000ms);
  ASSERT_EQ(p.a.state(), State::Up);
  EXPECT_EQ(p.a.tx_interval(), 900ms) << "max(own 500 ms, remote's required 900 ms)";
  // a's detection: the remote's multiplier x max(own required rx, remote desired tx)
  EXPECT_EQ(p.a.detection_time(), 5 * 500ms);
  EXPECT_EQ(p.b.detection_time(), 3 * 900ms);
}

TEST(BfdSession, TimerChangeWhileUpUsesAPollSequence) {
  Pair p;
  p.step(3000ms);
  Config faster;
  faster.desired_min_tx = 100ms;
  faster.required_min_rx = 100ms;
  p.a.set_config(faster, p.now);
  EXPECT_TRUE(p.a.poll_active());
  EXPECT_EQ(p.a.detection_time(), 1500ms) << "a reduced rx interval waits for the Final";
  p.step(1000ms);
  EXPECT_FALSE(p.a.poll_active());
  EXPECT_EQ(p.a.detection_time(), 3 * 500ms) << "b still sends every 500 ms";
  EXPECT_EQ(p.a.tx_interval(), 500ms) << "b still wants no more than one per 500 ms";
  p.b.set_config(faster, p.now);
  p.step(1000ms);
  EXPECT_FALSE(p.b.poll_active());
  EXPECT_EQ(p.a.tx_interval(), 100ms);
  EXPECT_EQ(p.a.detection_time(), 300ms);
  EXPECT_EQ(p.a.state(), State::Up) << "no false detection while the timers changed";
}

TEST(BfdSession, JitterStaysWithin75To100Percent) {
  Session s({}, 1, Time{} + 1h, 3);
  Time now = Time{} + 1h;
  Time last = now;
  ASSERT_TRUE(s.transmit(now).has_value());
  for (int i = 0; i < 200; ++i) {
    now = s.next_wakeup();
    ASSERT_TRUE(s.transmit(now).has_value());
    auto gap = now - last;
    EXPECT_GE(gap, 750ms);
    EXPECT_LE(gap, 1000ms);
    last = now;
  }
}

// Found by fuzzing: a peer advertising Required Min RX Interval 0
// ("send me nothing") left the next transmission in the past, so the daemon's
// loop woke at once, forever. RFC 5880 6.8.7: with a remote RequiredMinRxInterval
// of zero the local system must not transmit periodically, and has nothing to
// wake up for but its detection timer.
TEST(BfdSession, APeerThatAsksForNoPacketsDoesNotMakeTheSessionSpin) {
  const uint8_t bytes[] = {0x20, 0x40, 0x03, 0x18, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00,
                           0x00, 0x0f, 0x42, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  auto pkt = decode(bytes);
  ASSERT_TRUE(pkt) << pkt.error().what();
  EXPECT_EQ(pkt->required_min_rx_us, 0u);
  Config cfg;
  cfg.desired_min_tx = 500ms;
  cfg.required_min_rx = 500ms;
  cfg.detect_mult = 3;
  Time t{};
  Session s(cfg, 1001, t, 7);
  EXPECT_FALSE(s.receive(*pkt, t + 10ms)) << "a valid packet";
  int sent = 0, wakeups = 0;
  Time now = t + 20ms;
  for (; now < t + 10s && wakeups < 1000; ++wakeups) {
    if (s.transmit(now) && now < t + 2s) ++sent;
    Time next = s.next_wakeup();
    ASSERT_GT(next, now) << "next_wakeup() in the past: the loop would spin";
    now = std::min(next, t + 10s);  // the daemon's loop waits at most a second anyway
  }
  EXPECT_LT(wakeups, 100) << "the session woke " << wakeups << " times in 10 s";
  EXPECT_EQ(sent, 0) << "no periodic packets toward a peer that asked for none";
  EXPECT_EQ(s.state(), State::Down) << "its detection timer still ran out";
}

}  // namespace
}  // namespace dp::bfd

namespace dp::bfd {
namespace {

// Found by fuzz_bfd: a packet whose length field says 25 (a byte of padding)
// decoded, and encoding it wrote length 25 over 24 bytes.
TEST(BfdCodec, EncodeWritesTheLengthOfWhatItEncodes) {
  const uint8_t bytes[] = {0x2d, 0x20, 0x03, 0x19, 0x11, 0x01, 0x00, 0x00, 0x2d,
                           0x2d, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                           0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00};
  auto p = decode(bytes);
  ASSERT_TRUE(p) << p.error().what();
  auto again = decode(encode(*p));
  ASSERT_TRUE(again) << again.error().what();
  EXPECT_EQ(again->my_disc, p->my_disc);
}

// RFC 5880 6.7.4, Keyed SHA1 and Meticulous Keyed SHA1.
Auth sha1_auth(AuthType t = AuthType::MeticulousKeyedSha1) { return {t, 7, "shared-secret"}; }

TEST(BfdAuth, TheSectionCarriesTypeKeyIdSequenceAndTheSha1OfThePacketWithTheKeyInItsPlace) {
  Packet p = sample();
  p.auth_seq = 0x01020304;
  auto b = encode(p, sha1_auth());
  ASSERT_EQ(b.size(), 52u);
  EXPECT_EQ(b[1] & 0x04, 0x04) << "the A bit";
  EXPECT_EQ(b[3], 52);
  EXPECT_EQ(b[24], 5) << "Meticulous Keyed SHA1";
  EXPECT_EQ(b[25], 28);
  EXPECT_EQ(b[26], 7) << "the key ID";
  EXPECT_EQ(b[27], 0);
  EXPECT_EQ(b[28] << 24 | b[29] << 16 | b[30] << 8 | b[31], 0x01020304);
  // the digest as the RFC says to make it: the key, padded with zeros to 20
  // bytes, in the digest's place, and SHA1 over the whole packet
  std::vector<uint8_t> with_key(b.begin(), b.begin() + 32);
  std::string key = "shared-secret";
  with_key.insert(with_key.end(), key.begin(), key.end());
  with_key.resize(52, 0);
  uint8_t md[20];
  unsigned len = 0;
  ASSERT_EQ(EVP_Digest(with_key.data(), with_key.size(), md, &len, EVP_sha1(), nullptr), 1);
  EXPECT_EQ(std::vector<uint8_t>(b.begin() + 32, b.end()), std::vector<uint8_t>(md, md + 20));
  auto back = decode(b, sha1_auth());
  ASSERT_TRUE(back) << back.error().what();
  EXPECT_TRUE(back->auth);
  EXPECT_EQ(back->auth_seq, 0x01020304u);
  EXPECT_EQ(back->my_disc, p.my_disc);
}

TEST(BfdAuth, APacketThatDoesNotAuthenticateIsDiscardedWithItsReason) {
  Packet p = sample();
  const auto good = encode(p, sha1_auth());
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    Auth auth;
    const char* expect;
  };
  auto tampered = good;
  tampered[1] ^= 0xc0;  // the state
  auto short_section = good;
  short_section[25] = 24;
  const Case cases[] = {
      {"another key", encode(p, {AuthType::MeticulousKeyedSha1, 7, "shared-secreT"}), sha1_auth(),
       "digest does not match"},
      {"a changed byte", tampered, sha1_auth(), "digest does not match"},
      {"another key ID", encode(p, {AuthType::MeticulousKeyedSha1, 8, "shared-secret"}),
       sha1_auth(), "key ID 8"},
      {"keyed, not meticulous", encode(p, sha1_auth(AuthType::KeyedSha1)), sha1_auth(),
       "authentication type 4"},
      {"no section", encode(p, Auth{}), sha1_auth(), "no authentication section"},
      {"a section where none is used", good, Auth{}, "not in use"},
      {"a section of another length", short_section, sha1_auth(), "section of 24 bytes"},
  };
  for (const auto& c : cases) {
    auto r = decode(c.bytes, c.auth);
    ASSERT_FALSE(r) << c.what;
    EXPECT_NE(std::string(r.error().what()).find(c.expect), std::string::npos)
        << c.what << ": " << r.error().what();
  }
}

TEST(BfdAuth, TwoAuthenticatedSessionsComeUpAndAnotherKeyNeverDoes) {
  Pair p;
  p.auth = sha1_auth();
  p.a.set_auth(AuthType::MeticulousKeyedSha1, 100);
  p.b.set_auth(AuthType::MeticulousKeyedSha1, 0xfffffffe);  // wraps around
  p.step(3000ms);
  EXPECT_EQ(p.a.state(), State::Up);
  EXPECT_EQ(p.b.state(), State::Up);
  // b's packets signed with another key never reach a's session
  Session a(Config{}, 1001, p.t0, 7), b(Config{}, 2002, p.t0, 9);
  a.set_auth(AuthType::MeticulousKeyedSha1, 1);
  b.set_auth(AuthType::MeticulousKeyedSha1, 1);
  int discarded = 0;
  for (Time t = p.t0; t < p.t0 + 5s; t += 1ms)
    for (auto [from, to, key] : {std::tuple{&a, &b, "one"}, std::tuple{&b, &a, "two"}}) {
      from->expire(t);
      if (auto pk = from->transmit(t)) {
        auto back = decode(encode(*pk, {AuthType::MeticulousKeyedSha1, 7, key}),
                           {AuthType::MeticulousKeyedSha1, 7, "one"});
        if (back)
          to->receive(*back, t);
        else
          ++discarded;
      }
    }
  EXPECT_NE(a.state(), State::Up);
  EXPECT_GT(discarded, 0);
}

TEST(BfdAuth, MeticulousRefusesASequenceNumberSeenBeforeOrTooFarAheadKeyedRefusesOnlyTheLatter) {
  for (auto type : {AuthType::MeticulousKeyedSha1, AuthType::KeyedSha1}) {
    const bool meticulous = type == AuthType::MeticulousKeyedSha1;
    Time t = Time{} + 1h;
    Session s(Config{}, 1001, t, 7);
    s.set_auth(type, 1);
    Packet p = sample();
    p.state = State::Down;
    p.your_disc = 0;
    p.auth = true;
    p.auth_seq = 1000;
    EXPECT_EQ(s.receive(p, t), std::nullopt) << "the first is taken as it is";
    t += 300ms;
    auto again = s.receive(p, t);  // a replay of the same packet
    EXPECT_EQ(again.has_value(), meticulous) << to_string(type);
    if (again) {
      EXPECT_NE(again->find("a replay?"), std::string::npos) << *again;
    }
    t += 300ms;
    p.auth_seq = 1000 + 3 * p.detect_mult;  // the window's end
    EXPECT_EQ(s.receive(p, t), std::nullopt) << to_string(type);
    t += 300ms;
    p.auth_seq += 3 * p.detect_mult + 1;  // beyond it
    EXPECT_TRUE(s.receive(p, t).has_value()) << to_string(type);
    // none accepted for twice the detection time: the next is taken as it is
    t += 2 * std::max(s.detection_time(), std::chrono::duration_cast<Micros>(1s)) + 1ms;
    EXPECT_EQ(s.receive(p, t), std::nullopt) << to_string(type);
  }
}

TEST(BfdAuth, TheSequenceNumberGoesUpByOneEachPacketSent) {
  Time t = Time{} + 1h;
  Session s(Config{}, 1001, t, 7);
  s.set_auth(AuthType::MeticulousKeyedSha1, 0xffffffff);
  std::vector<uint32_t> seqs;
  for (Time at = t; seqs.size() < 3; at += 10ms)
    if (auto p = s.transmit(at)) {
      EXPECT_TRUE(p->auth);
      seqs.push_back(p->auth_seq);
    }
  EXPECT_EQ(seqs, (std::vector<uint32_t>{0xffffffff, 0, 1}));
}

}  // namespace
}  // namespace dp::bfd

// The key file the daemon reads when it applies a policy (PathMonitor).
namespace dp {
namespace {

struct KeyFile {
  std::string path = ::testing::TempDir() + "/dp-bfd-key-" + std::to_string(::getpid());
  KeyFile(const std::string& bytes, mode_t mode) {
    std::ofstream(path, std::ios::binary) << bytes;
    ::chmod(path.c_str(), mode);
  }
  ~KeyFile() { std::remove(path.c_str()); }
};

Result<bfd::Auth> read_key(const std::string& path) {
  HealthSettings h;
  h.bfd_auth = 5;
  h.bfd_auth_key_id = 3;
  h.bfd_auth_key_file = path;
  return PathMonitor::read_auth(h);
}

TEST(BfdAuthKeyFile, IsReadWithoutItsFinalNewlineAndRefusedWhenOthersMayReadItOrItDoesNotFit) {
  {
    KeyFile f("s3cret\n", 0600);
    auto a = read_key(f.path);
    ASSERT_TRUE(a) << a.error().what();
    EXPECT_EQ(a->type, bfd::AuthType::MeticulousKeyedSha1);
    EXPECT_EQ(a->key_id, 3);
    EXPECT_EQ(a->key, "s3cret");
  }
  struct Case {
    const char* bytes;
    mode_t mode;
    const char* expect;
  } cases[] = {{"s3cret", 0644, "chmod 600"},
               {"s3cret", 0660, "chmod 600"},
               {"\n", 0600, "holds 0 bytes"},
               {"123456789012345678901", 0400, "more than 20"}};
  for (const auto& c : cases) {
    KeyFile f(c.bytes, c.mode);
    auto a = read_key(f.path);
    ASSERT_FALSE(a) << c.bytes;
    EXPECT_NE(std::string(a.error().what()).find(c.expect), std::string::npos) << a.error().what();
  }
  {
    KeyFile f("s3cret", 0600);
    ASSERT_EQ(::chown(f.path.c_str(), ::geteuid() + 1, static_cast<gid_t>(-1)), 0);
    auto a = read_key(f.path);
    ASSERT_FALSE(a);
    EXPECT_NE(std::string(a.error().what()).find("belongs to uid"), std::string::npos)
        << a.error().what();
  }
  auto missing = read_key("/nonexistent/bfd.key");
  ASSERT_FALSE(missing);
  EXPECT_NE(std::string(missing.error().what()).find("No such file"), std::string::npos)
      << missing.error().what();
  HealthSettings none;
  auto off = PathMonitor::read_auth(none);
  ASSERT_TRUE(off);
  EXPECT_EQ(off->type, bfd::AuthType::None);
}

}  // namespace
}  // namespace dp
