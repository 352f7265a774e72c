// SPDX-License-Identifier: Apache-2.0
// BFD (RFC 5880) asynchronous mode: the control packet codec and one
// session's state machine. Pure: time is passed in, packets go in and out as
// values; the daemon owns the sockets (RFC 5881 single hop, UDP 3784, TTL 255).
// Authentication (6.7): Keyed SHA1 and Meticulous Keyed SHA1, one key for
// every session of the node. Not implemented: demand mode, echo mode, the
// password and MD5 authentication types (a packet that carries one is
// discarded, as 6.8.6 requires of a session that does not use it).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dualpath/core/rate_limit.h"
#include "dualpath/core/result.h"

namespace dp::bfd {

using Clock = std::chrono::steady_clock;
using Time = Clock::time_point;
using Micros = std::chrono::microseconds;

constexpr uint16_t kPort = 3784;  // RFC 5881 single-hop control
constexpr uint16_t kSourcePortMin = 49152;
constexpr uint8_t kTtl = 255;
constexpr size_t kMinLength = 24;
constexpr size_t kMinLengthAuth = 26;
// RFC 5880 6.8.3: while not Up, the desired transmit interval is at least 1 s.
constexpr Micros kSlowTx = std::chrono::seconds(1);

enum class State : uint8_t { AdminDown = 0, Down = 1, Init = 2, Up = 3 };
enum class Diag : uint8_t {
  None = 0,
  TimeExpired = 1,
  EchoFailed = 2,
  NeighborDown = 3,
  ForwardingReset = 4,
  PathDown = 5,
  ConcatPathDown = 6,
  AdminDown = 7,
  ReverseConcatPathDown = 8,
};

const char* to_string(State s);
const char* to_string(Diag d);

// RFC 5880 4.1's Auth Type, the two this implementation speaks.
enum class AuthType : uint8_t { None = 0, KeyedSha1 = 4, MeticulousKeyedSha1 = 5 };
const char* to_string(AuthType t);  // "none", "keyed-sha1", "meticulous-keyed-sha1"
constexpr size_t kMaxKey = 20;      // 6.7.4: the key is 1 to 20 bytes
constexpr size_t kSha1AuthLength = 28;
constexpr size_t kLengthSha1 = kMinLength + kSha1AuthLength;

// What the node's sessions authenticate with: the type, the key's ID and the
// key, the same at both ends of each session.
struct Auth {
  AuthType type = AuthType::None;
  uint8_t key_id = 0;
  std::string key;  // 1 to kMaxKey bytes when type is not None
  bool operator==(const Auth&) const = default;
};

struct Packet {
  uint8_t version = 1;
  Diag diag = Diag::None;
  State state = State::Down;
  bool poll = false, final = false, cpi = false, auth = false, demand = false, multipoint = false;
  uint8_t detect_mult = 3;
  uint8_t length = kMinLength;
  uint32_t my_disc = 0, your_disc = 0;
  uint32_t desired_min_tx_us = 0, required_min_rx_us = 0, required_min_echo_rx_us = 0;
  uint32_t auth_seq = 0;  // the authentication section's sequence number (auth set)
};

std::array<uint8_t, kMinLength> encode(const Packet& p);
// With the authentication section of `a` (none when a.type is None): the A
// bit, the key's ID, p.auth_seq and the SHA1 digest of the packet with the
// key in the digest's place (6.7.4).
std::vector<uint8_t> encode(const Packet& p, const Auth& a);
// Decodes and applies every rule of RFC 5880 6.8.6 that needs no session
// (version, length, detect mult, multipoint, my discriminator, your
// discriminator zero outside Down/AdminDown, authentication, P and F together).
// The error names the rule.
Result<Packet> decode(std::span<const uint8_t> bytes);
// The same for a node that authenticates with `a`: the A bit must be set
// exactly when a.type is not None, and then the section's type, length and
// key ID must be a's and its digest must match (6.7.4). The sequence number
// is the session's to check (Session::receive).
Result<Packet> decode(std::span<const uint8_t> bytes, const Auth& a);

struct Config {
  Micros desired_min_tx = std::chrono::milliseconds(500);
  Micros required_min_rx = std::chrono::milliseconds(500);
  uint8_t detect_mult = 3;
};

struct Transition {
  Time t;
  State from, to;
  Diag diag;
  // Down because the peer's session started afresh: a Down from another
  // discriminator than the one this session was up with, addressed to no
  // session (your discriminator 0). Its daemon restarted; the packet itself
  // came over the rail.
  bool peer_restarted = false;
};

class Session {
 public:
  // `local_disc` must be nonzero and unique on this system; `seed` drives the
  // transmit jitter (RFC 5880 6.8.7).
  Session(Config cfg, uint32_t local_disc, Time now, uint32_t seed = 1);

  // A packet that passed decode() and the transport checks (TTL 255, right
  // interface). Returns why it was discarded, if it was. A peer sends one a
  // transmit interval, never more often than this session's required_min_rx
  // asks (6.8.7), and a Final per Poll: beyond kRxRateFactor times that rate
  // (after a burst of kRxBurst), packets are discarded before they are looked
  // at, so that a flood from the peer's own address (the only one the
  // transport accepts) moves nothing and costs bounded work.
  std::optional<std::string> receive(const Packet& p, Time now);
  static constexpr double kRxRateFactor = 4;
  static constexpr double kRxBurst = 16;
  // The packet to send now, if one is due (periodic, or the Final answer to
  // a Poll); call at or after next_wakeup().
  std::optional<Packet> transmit(Time now);
  // Runs the detection timer.
  void expire(Time now);
  Time next_wakeup() const;

  // Authentication (6.7.4): packets sent carry a sequence number from
  // `first_seq` on, one more each; a packet received must carry one in the
  // window after the last accepted (3 x its Detect Mult wide; meticulous:
  // strictly after it), once one is known. None: no authentication.
  void set_auth(AuthType type, uint32_t first_seq);
  AuthType auth() const { return auth_; }

  void set_admin_down(bool down, Time now);
  // New timers; while Up they are negotiated with a Poll Sequence.
  void set_config(Config cfg, Time now);

  State state() const { return state_; }
  Diag diag() const { return diag_; }
  State remote_state() const { return remote_state_; }
  uint32_t local_disc() const { return local_disc_; }
  uint32_t remote_disc() const { return remote_disc_; }
  bool poll_active() const { return poll_; }
  Micros tx_interval() const;     // before jitter
  Micros detection_time() const;  // 0 until the remote's timers are known
  uint64_t rx_packets() const { return rx_; }
  uint64_t tx_packets() const { return tx_; }
  const Config& config() const { return cfg_; }
  // Transitions since the last call, oldest first.
  std::vector<Transition> take_transitions();

 private:
  void go(State to, Diag d, Time now);
  Micros desired_tx() const;  // as advertised now
  Packet build() const;
  void schedule_tx(Time now);
  void rearm_detection(Time now);
  Micros fastest_rx() const;  // the shortest interval the peer may send at

  Config cfg_;
  Config active_;  // what the remote has acknowledged (differs during a Poll)
  uint32_t local_disc_;
  uint32_t remote_disc_ = 0;
  State state_ = State::Down;
  State remote_state_ = State::Down;
  Diag diag_ = Diag::None;
  Micros remote_min_rx_{1};  // RFC 5880 6.8.1: initialised to 1
  Micros remote_desired_tx_{0};
  uint8_t remote_detect_mult_ = 0;
  bool poll_ = false;
  bool send_final_ = false;
  Time next_tx_;
  std::optional<Time> detect_deadline_;
  uint64_t rx_ = 0, tx_ = 0;
  TokenBucket rx_bucket_{kRxBurst, {}};  // packets the peer may still send now
  AuthType auth_ = AuthType::None;
  uint32_t xmit_seq_ = 0;  // bfd.XmitAuthSeq
  uint32_t rcv_seq_ = 0;   // bfd.RcvAuthSeq, while auth_seq_known_until_ has not passed
  std::optional<Time> auth_seq_known_until_;  // bfd.AuthSeqKnown: 2 x the detection time
  uint32_t rng_;
  std::vector<Transition> transitions_;
};

}  // namespace dp::bfd
