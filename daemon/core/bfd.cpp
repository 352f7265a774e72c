// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/bfd.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <optional>

namespace dp::bfd {
namespace {

uint32_t get32(std::span<const uint8_t> b, size_t at) {
  return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 |
         uint32_t(b[at + 3]);
}
void put32(uint8_t* b, uint32_t v) {
  b[0] = static_cast<uint8_t>(v >> 24);
  b[1] = static_cast<uint8_t>(v >> 16);
  b[2] = static_cast<uint8_t>(v >> 8);
  b[3] = static_cast<uint8_t>(v);
}
uint32_t us(Micros m) { return static_cast<uint32_t>(std::max<int64_t>(0, m.count())); }

// 6.7.4: the SHA1 of the packet (kLengthSha1 bytes) with the key, padded
// with zeros to 20 bytes, in the digest's place.
// nullopt: SHA1 failed (a crypto library without it), and nothing may pass.
std::optional<std::array<uint8_t, 20>> sha1_digest(std::span<const uint8_t> packet,
                                                   const std::string& key) {
  std::array<uint8_t, kLengthSha1> b{};
  std::copy_n(packet.begin(), kMinLength + 8, b.begin());
  std::copy_n(key.begin(), std::min(key.size(), kMaxKey), b.begin() + kMinLength + 8);
  std::array<uint8_t, 20> md{};
  unsigned len = 0;
  if (EVP_Digest(b.data(), b.size(), md.data(), &len, EVP_sha1(), nullptr) != 1 || len != 20)
    return std::nullopt;
  return md;
}

}  // namespace

const char* to_string(AuthType t) {
  switch (t) {
    case AuthType::None:
      return "none";
    case AuthType::KeyedSha1:
      return "keyed-sha1";
    case AuthType::MeticulousKeyedSha1:
      return "meticulous-keyed-sha1";
  }
  return "?";
}

const char* to_string(State s) {
  switch (s) {
    case State::AdminDown:
      return "admin-down";
    case State::Down:
      return "down";
    case State::Init:
      return "init";
    case State::Up:
      return "up";
  }
  return "?";
}

const char* to_string(Diag d) {
  switch (d) {
    case Diag::None:
      return "none";
    case Diag::TimeExpired:
      return "control detection time expired";
    case Diag::EchoFailed:
      return "echo function failed";
    case Diag::NeighborDown:
      return "neighbor signaled session down";
    case Diag::ForwardingReset:
      return "forwarding plane reset";
    case Diag::PathDown:
      return "path down";
    case Diag::ConcatPathDown:
      return "concatenated path down";
    case Diag::AdminDown:
      return "administratively down";
    case Diag::ReverseConcatPathDown:
      return "reverse concatenated path down";
  }
  return "?";
}

std::array<uint8_t, kMinLength> encode(const Packet& p) {
  std::array<uint8_t, kMinLength> b{};
  b[0] = static_cast<uint8_t>((p.version & 0x7) << 5 | (static_cast<uint8_t>(p.diag) & 0x1f));
  b[1] = static_cast<uint8_t>(static_cast<uint8_t>(p.state) << 6 | p.poll << 5 | p.final << 4 |
                              p.cpi << 3 | p.auth << 2 | p.demand << 1 | p.multipoint);
  b[2] = p.detect_mult;
  b[3] = kMinLength;  // what is encoded: no authentication section (a decoded
                      // packet's longer length field would describe bytes not written)
  put32(&b[4], p.my_disc);
  put32(&b[8], p.your_disc);
  put32(&b[12], p.desired_min_tx_us);
  put32(&b[16], p.required_min_rx_us);
  put32(&b[20], p.required_min_echo_rx_us);
  return b;
}

std::vector<uint8_t> encode(const Packet& p, const Auth& a) {
  auto base = encode(p);
  std::vector<uint8_t> b(base.begin(), base.end());
  if (a.type == AuthType::None) {
    b[1] &= static_cast<uint8_t>(~0x04);
    return b;
  }
  b.resize(kLengthSha1, 0);
  b[1] |= 0x04;
  b[3] = kLengthSha1;
  b[24] = static_cast<uint8_t>(a.type);
  b[25] = kSha1AuthLength;
  b[26] = a.key_id;
  b[27] = 0;  // reserved
  put32(&b[28], p.auth_seq);
  // without SHA1 the digest stays zeros, which the peer discards
  if (auto md = sha1_digest(b, a.key))
    std::copy(md->begin(), md->end(), b.begin() + kMinLength + 8);
  return b;
}

Result<Packet> decode(std::span<const uint8_t> b) { return decode(b, Auth{}); }

Result<Packet> decode(std::span<const uint8_t> b, const Auth& a) {
  if (b.size() < kMinLength)
    return DP_ERROR("{} bytes is shorter than a BFD control packet (24)", b.size());
  Packet p;
  p.version = b[0] >> 5;
  p.diag = static_cast<Diag>(b[0] & 0x1f);
  p.state = static_cast<State>(b[1] >> 6);
  p.poll = b[1] & 0x20;
  p.final = b[1] & 0x10;
  p.cpi = b[1] & 0x08;
  p.auth = b[1] & 0x04;
  p.demand = b[1] & 0x02;
  p.multipoint = b[1] & 0x01;
  p.detect_mult = b[2];
  p.length = b[3];
  p.my_disc = get32(b, 4);
  p.your_disc = get32(b, 8);
  p.desired_min_tx_us = get32(b, 12);
  p.required_min_rx_us = get32(b, 16);
  p.required_min_echo_rx_us = get32(b, 20);
  // RFC 5880 6.8.6, in its order
  if (p.version != 1) return DP_ERROR("version {} is not 1", p.version);
  if (p.length < (p.auth ? kMinLengthAuth : kMinLength))
    return DP_ERROR("length field {} is below the minimum {}", p.length,
                    p.auth ? kMinLengthAuth : kMinLength);
  if (p.length > b.size())
    return DP_ERROR("length field {} exceeds the {} bytes received", p.length, b.size());
  if (p.detect_mult == 0) return DP_ERROR("detect multiplier is zero");
  if (p.multipoint) return DP_ERROR("multipoint bit is set");
  if (p.my_disc == 0) return DP_ERROR("my discriminator is zero");
  if (p.your_disc == 0 && p.state != State::Down && p.state != State::AdminDown)
    return DP_ERROR("your discriminator is zero in state {}", to_string(p.state));
  if (p.auth && a.type == AuthType::None)
    return DP_ERROR("authentication bit is set but authentication is not in use");
  if (!p.auth && a.type != AuthType::None)
    return DP_ERROR("no authentication section, but this node authenticates BFD ({})",
                    to_string(a.type));
  if (p.auth) {
    auto type = static_cast<AuthType>(b[24]);
    if (type != a.type)
      return DP_ERROR("authentication type {}, not this node's {} ({})", b[24],
                      static_cast<int>(a.type), to_string(a.type));
    if (b[25] != kSha1AuthLength || p.length != kLengthSha1)
      return DP_ERROR(
          "authentication section of {} bytes in a packet of {}: keyed SHA1's is {} "
          "in {}",
          b[25], p.length, kSha1AuthLength, kLengthSha1);
    if (b[26] != a.key_id)
      return DP_ERROR("authentication key ID {} is not this node's {}", b[26], a.key_id);
    auto md = sha1_digest(b.first(kLengthSha1), a.key);
    if (!md) return DP_ERROR("SHA1 is not available to check the authentication digest");
    if (CRYPTO_memcmp(md->data(), b.data() + kMinLength + 8, md->size()) != 0)
      return DP_ERROR("the authentication digest does not match (another key?)");
    p.auth_seq = get32(b, 28);
  }
  // RFC 5880 6.5: a packet never carries both
  if (p.poll && p.final) return DP_ERROR("poll and final bits are both set");
  return p;
}

// ---------------------------------------------------------------- session

Session::Session(Config cfg, uint32_t local_disc, Time now, uint32_t seed)
    : cfg_(cfg), local_disc_(local_disc), rng_(seed ? seed : 1) {
  active_ = cfg_;
  active_.desired_min_tx = desired_tx();
  next_tx_ = now;
}

Micros Session::desired_tx() const {
  return state_ == State::Up ? cfg_.desired_min_tx : std::max(cfg_.desired_min_tx, kSlowTx);
}

Micros Session::tx_interval() const {
  // 6.8.3: an increase waits for the Poll Sequence; a decrease is immediate
  Micros mine = std::min(desired_tx(), active_.desired_min_tx);
  return std::max(mine, remote_min_rx_);
}

Micros Session::detection_time() const {
  if (!remote_detect_mult_) return Micros(0);
  // 6.8.3: a reduced RequiredMinRxInterval counts only after the Poll Sequence
  Micros rx = std::max(cfg_.required_min_rx, active_.required_min_rx);
  return remote_detect_mult_ * std::max(rx, remote_desired_tx_);
}

Packet Session::build() const {
  Packet p;
  p.diag = diag_;
  p.state = state_;
  p.detect_mult = cfg_.detect_mult;
  p.my_disc = local_disc_;
  p.your_disc = remote_disc_;
  p.desired_min_tx_us = us(desired_tx());
  p.required_min_rx_us = us(cfg_.required_min_rx);
  p.required_min_echo_rx_us = 0;  // no echo function
  return p;
}

void Session::schedule_tx(Time now) {
  // 6.8.7: 75-100% of the interval, 75-90% when the multiplier is 1
  rng_ = rng_ * 1664525u + 1013904223u;
  int top = cfg_.detect_mult == 1 ? 90 : 100;
  int pct = 75 + static_cast<int>((rng_ >> 8) % static_cast<uint32_t>(top - 75 + 1));
  next_tx_ = now + tx_interval() * pct / 100;
}

void Session::rearm_detection(Time now) {
  Micros d = detection_time();
  if (d.count() > 0)
    detect_deadline_ = now + d;
  else
    detect_deadline_.reset();
}

void Session::go(State to, Diag d, Time now) {
  if (to == state_) return;
  transitions_.push_back({now, state_, to, d});
  State from = state_;
  state_ = to;
  diag_ = d;
  Micros want = desired_tx();
  if (to == State::Up || from == State::Up) {
    // entering Up lowers the advertised interval: negotiate it (6.8.3);
    // leaving Up raises it, which outside Up applies at once
    if (to == State::Up) {
      poll_ = want != active_.desired_min_tx || cfg_.required_min_rx != active_.required_min_rx;
      if (!poll_) active_ = {want, cfg_.required_min_rx, cfg_.detect_mult};
    } else {
      poll_ = false;
      active_ = {want, cfg_.required_min_rx, cfg_.detect_mult};
    }
  }
}

Micros Session::fastest_rx() const {
  // the shorter of what this session asks for and what the peer has
  // acknowledged (a Poll may be shortening it)
  return std::max(std::min(cfg_.required_min_rx, active_.required_min_rx), Micros(1));
}

std::optional<std::string> Session::receive(const Packet& p, Time now) {
  // the rules of 6.8.6 that need the session, before the rate limit: a
  // flood of packets for another session, or of replays, must not use up
  // what the peer's own packets may spend
  if (p.your_disc != 0 && p.your_disc != local_disc_)
    return "your discriminator " + std::to_string(p.your_disc) + " is not this session's";
  if (auth_ != AuthType::None) {
    // 6.7.4: a sequence number in the window after the last accepted; the
    // first after 2 x the detection time without one is taken as it is
    if (auth_seq_known_until_ && now > *auth_seq_known_until_) auth_seq_known_until_.reset();
    if (!p.auth) return "no authentication section";
    if (auth_seq_known_until_) {
      const uint32_t ahead = p.auth_seq - rcv_seq_;  // modulo 2^32
      const uint32_t window = 3u * p.detect_mult;
      const bool meticulous = auth_ == AuthType::MeticulousKeyedSha1;
      if (ahead > window || (meticulous && ahead == 0))
        return fmt::format("authentication sequence number {} is outside {}..{} (a replay?)",
                           p.auth_seq, rcv_seq_ + (meticulous ? 1 : 0), rcv_seq_ + window);
    }
  }
  const Micros min_rx = fastest_rx();
  if (rx_bucket_.take(1, kRxBurst, kRxRateFactor * 1e6 / static_cast<double>(min_rx.count()),
                      now) == 0)
    return fmt::format("more than {:g} times the packets the peer may send (required min RX {} us)",
                       kRxRateFactor, min_rx.count());
  if (auth_ != AuthType::None) rcv_seq_ = p.auth_seq;
  ++rx_;
  const uint32_t known_disc = remote_disc_;
  remote_disc_ = p.my_disc;
  remote_state_ = p.state;
  remote_min_rx_ = Micros(p.required_min_rx_us);
  remote_desired_tx_ = Micros(p.desired_min_tx_us);
  remote_detect_mult_ = p.detect_mult;
  if (p.final && poll_) {
    poll_ = false;  // the remote acknowledged what we advertise
    active_ = {desired_tx(), cfg_.required_min_rx, cfg_.detect_mult};
  }
  rearm_detection(now);
  if (auth_ != AuthType::None)
    auth_seq_known_until_ = now + 2 * std::max(detection_time(), Micros(cfg_.required_min_rx));
  if (p.poll) send_final_ = true;
  // a transmit interval that became shorter takes effect now, not a slow
  // interval later
  if (next_tx_ > now + tx_interval()) schedule_tx(now);
  if (state_ == State::AdminDown) return "the session is administratively down";
  if (p.state == State::AdminDown) {
    if (state_ != State::Down) go(State::Down, Diag::NeighborDown, now);
  } else if (state_ == State::Down) {
    if (p.state == State::Down)
      go(State::Init, Diag::None, now);
    else if (p.state == State::Init)
      go(State::Up, Diag::None, now);
  } else if (state_ == State::Init) {
    if (p.state == State::Init || p.state == State::Up) go(State::Up, Diag::None, now);
  } else if (p.state == State::Down) {  // Up
    go(State::Down, Diag::NeighborDown, now);
    // a session that timed out keeps its discriminator; a restarted peer
    // has a new one and knows none of ours yet
    transitions_.back().peer_restarted =
        known_disc != 0 && p.my_disc != known_disc && p.your_disc == 0;
  }
  return std::nullopt;
}

void Session::expire(Time now) {
  if (!detect_deadline_ || now < *detect_deadline_) return;
  detect_deadline_.reset();
  // 6.8.1: RemoteDiscr resets when the Detection Time passes without a packet
  remote_disc_ = 0;
  remote_state_ = State::Down;
  remote_detect_mult_ = 0;
  remote_min_rx_ = Micros(1);
  if (state_ == State::Init || state_ == State::Up) go(State::Down, Diag::TimeExpired, now);
}

std::optional<Packet> Session::transmit(Time now) {
  expire(now);
  bool periodic = now >= next_tx_ && remote_min_rx_.count() > 0;
  if (!send_final_ && !periodic) return std::nullopt;
  Packet p = build();
  if (send_final_) {
    p.final = true;  // 6.8.7: the answer to a Poll carries F and never P
    send_final_ = false;
  } else {
    p.poll = poll_;
  }
  if (periodic) schedule_tx(now);
  if (auth_ != AuthType::None) {
    p.auth = true;
    p.auth_seq = xmit_seq_++;  // one more each packet: meticulous's rule, keyed SHA1's option
  }
  ++tx_;
  return p;
}

Time Session::next_wakeup() const {
  // 6.8.7: a remote RequiredMinRxInterval of zero means no periodic packets,
  // so nothing to wake up for but a Final and the detection timer
  Time t = send_final_ ? Time{} : remote_min_rx_.count() > 0 ? next_tx_ : Time::max();
  if (detect_deadline_ && *detect_deadline_ < t) t = *detect_deadline_;
  return t;
}

void Session::set_auth(AuthType type, uint32_t first_seq) {
  auth_ = type;
  xmit_seq_ = first_seq;
  auth_seq_known_until_.reset();
}

void Session::set_admin_down(bool down, Time now) {
  if (down)
    go(State::AdminDown, Diag::AdminDown, now);
  else if (state_ == State::AdminDown)
    go(State::Down, Diag::None, now);
  detect_deadline_.reset();
  next_tx_ = now;  // tell the remote at once
}

void Session::set_config(Config cfg, Time now) {
  cfg_ = cfg;
  if (state_ == State::Up) {
    poll_ =
        desired_tx() != active_.desired_min_tx || cfg_.required_min_rx != active_.required_min_rx;
  } else {
    active_ = {desired_tx(), cfg_.required_min_rx, cfg_.detect_mult};
  }
  if (next_tx_ > now + tx_interval()) next_tx_ = now;
}

std::vector<Transition> Session::take_transitions() {
  std::vector<Transition> out;
  out.swap(transitions_);
  return out;
}

}  // namespace dp::bfd
