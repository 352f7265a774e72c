// SPDX-License-Identifier: Apache-2.0
// BFD codec and state machine against RFC 5880.
#include <gtest/gtest.h>

#include "dualpath/core/bfd.h"

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
  Pair(Config ca = {}, Config cb = {}) : a(ca, 1001, t0, 7), b(cb, 2002, t0, 9) {}
  void step(std::chrono::milliseconds d) {
    Time end = now + d;
    while (now < end) {
      now += 1ms;
      for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
        from->expire(now);
        if (auto p = from->transmit(now); p && !cut) {
          auto wire = encode(*p);
          auto back = decode(wire);
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

}  // namespace
}  // namespace dp::bfd
