// SPDX-License-Identifier: Apache-2.0
// Pure translation of a policy into the contents of the datapath's maps, and
// the stable slot assignment of classes and rails. No kernel access: this is
// what the unit tests check byte for byte.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/abi.h"
#include "dualpath/core/measure.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"

namespace dp {

// Assigns each wanted name a slot in [0, capacity): a name that already has a
// slot keeps it, new names take the lowest free slot. `reserved` slots are
// never given out. Fails if there are not enough slots.
Result<std::vector<int>> assign_slots(const std::vector<std::string>& existing,
                                      const std::vector<std::string>& wanted, size_t capacity,
                                      const std::vector<int>& reserved = {});

struct EncodedPolicy {
  std::vector<dp_port_entry> ports;  // DP_PORT_SPACE entries
  std::vector<std::pair<uint32_t, uint8_t>> marks;
  uint32_t default_class = DP_CLASS_NONE;
  std::vector<int> class_slot;  // per policy class
  std::vector<int> rail_slot;   // per policy path
};

EncodedPolicy encode_policy(const Policy& p, const std::vector<int>& class_slot,
                            const std::vector<int>& rail_slot);

// dp_decision.flags: pinned by dpctl class set (beside DP_DECISION_F_PINNED).
// The datapath ignores it; a restarted daemon reads it back.
inline constexpr uint32_t kOperatorPinned = 1u << 16;

// The whole class on one rail.
dp_decision decision_all_on(int rail_slot, bool pinned, uint32_t version);
// The rail slot holding the whole share, if one does.
std::optional<int> decision_single_rail(const dp_decision& d);

// A rail: a redirect target (shared topology) or a target of connect-time
// placement (separate), when enabled; in the shared topology with a
// multipath class, also up for the answers of multipath subflows (until the
// daemon's health says otherwise: Datapath::set_rails_up).
dp_rail encode_rail(const PathSpec& p, uint32_t ifindex, bool enabled,
                    Topology t = Topology::Shared, bool multipath = false);
// The rail's networks for connect-time placement (zero in the shared topology).
dp_rail_net encode_rail_net(const PathSpec& p, Topology t);
// dp_peers entries of the policy's [[peer]] table: one per address, keyed
// by it, each with the peer's address on every rail slot (rail_slot: the
// slot of each path index). None outside the separate topology.
std::vector<std::pair<dp_peer_key, dp_peer>> encode_peers(const Policy& p,
                                                          const std::vector<int>& rail_slot);
// This node's own addresses on a rail (source, source6), for the sk_lookup
// handover (abi.h, dp_local_addr): all zero in the shared topology.
dp_local_addr encode_local_addr(const PathSpec& p, Topology t);

// What the egress program stamps on a class's packets (flags 0: nothing),
// and on its pure ACKs where the policy's [qos] says.
dp_class_qos encode_qos(const ClassSpec& c, const QosSettings& node);
// The TCP settings sockops applies to the class's connections; `tcp_retries2`
// is the node's (its user timeout keeps the lifetime the kernel's backoff gives).
dp_class_tcp encode_class_tcp(const ClassSpec& c, int tcp_retries2 = 15);
// How long the kernel lets a connection retransmit before it gives up, with
// its default backoff (tcp_retries2 retransmissions, 200 ms to 120 s).
uint32_t retries_timeout_ms(int tcp_retries2);

dp_slot_name encode_name(const std::string& name);
std::string decode_name(const dp_slot_name& n);

// "non_ip", "fragment", ... for enum dp_exception
const char* exception_name(int reason);

// Per-CPU values of the datapath's counter maps, summed.
dp_counters sum_counters(const std::vector<dp_counters>& per_cpu);
TcpCounters sum_tcp(const std::vector<dp_tcp_stats>& per_cpu);
void add_tcp(TcpCounters& into, const TcpCounters& c);

}  // namespace dp
