// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the BFD decoder and session on any datagram, as a BFD peer (or
// anyone who can reach UDP 3784 on a rail) can send. A packet is decoded or
// discarded with a reason; one that passes is fed to a session, which must
// not end up wanting to wake up in the past (it would spin the daemon).
#include <chrono>
#include <cstdint>
#include <span>

#include "dualpath/core/bfd.h"

using namespace std::chrono_literals;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // without authentication, and as a node that authenticates (the section's
  // checks before the digest; a packet signed with the key re-encodes so)
  static const dp::bfd::Auth kAuth{dp::bfd::AuthType::MeticulousKeyedSha1, 1, "fuzz-key"};
  const bool signed_ = size > 0 && (data[0] & 1);
  const dp::bfd::Auth& auth = signed_ ? kAuth : dp::bfd::Auth{};
  auto p = dp::bfd::decode(std::span<const uint8_t>(data, size), auth);
  if (!p) return 0;
  auto round = dp::bfd::encode(*p, auth);
  auto again = dp::bfd::decode(round, auth);
  if (!again) __builtin_trap();  // what decodes re-encodes to something that decodes
  dp::bfd::Config cfg;
  cfg.desired_min_tx = 300ms;
  cfg.required_min_rx = 300ms;
  cfg.detect_mult = 3;
  dp::bfd::Session s(cfg, 1001, dp::bfd::Time{}, 7);
  s.set_auth(auth.type, 5);
  auto now = dp::bfd::Time{} + 10ms;
  (void)s.receive(*p, now);
  for (int i = 0; i < 50; ++i) {
    (void)s.transmit(now);
    auto next = s.next_wakeup();
    if (next <= now) __builtin_trap();  // the daemon's loop would spin
    now = std::min(next, now + 2s);
  }
  return 0;
}
