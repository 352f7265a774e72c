// SPDX-License-Identifier: Apache-2.0
// Policy routing with libnl-route-3: per path an `ip rule fwmark M lookup T`
// and the path's routes in table T. Everything dualpath creates carries the
// policy's route protocol number, and its rules sit in the policy's rule
// priority range; only objects with both marks of ownership are changed.
#pragma once

#include <string>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"

namespace dp {

struct RoutingObject {
  std::string kind;  // "rule" or "route"
  std::string text;  // as `ip` would print it, roughly
};

struct RoutingChange {
  int added = 0;
  int removed = 0;
  int unchanged = 0;
  // routes on an interface that is set down: the kernel refuses them (and
  // flushed them when it went down); added again once it is up
  int skipped = 0;
  // routes the kernel refused to add, each with why (a gateway not on the
  // interface's networks: an IPv6 address that a link set down flushed);
  // the others are applied, and these are tried again at the next resync
  std::vector<std::string> refused;
};

class Routing {
 public:
  // Makes the kernel's rules and routes that dualpath owns equal to what the
  // policy asks: adds the missing, removes stale ones of ours, leaves the
  // rest. Applying twice changes nothing the second time. `failed` (per
  // path) redirects a failed path's fwmark rule to the first surviving
  // path's table and adds "to <each of its routes> lookup <that table>".
  static Result<RoutingChange> apply(const Policy& p, const std::vector<bool>& failed = {});
  // Removes every rule and route dualpath owns according to the policy's
  // ownership marks (rule priority range and route protocol).
  static Result<RoutingChange> remove(const Policy& p);
  // What dualpath owns right now.
  static Result<std::vector<RoutingObject>> owned(const Policy& p);
  // What apply(p, failed) would add: rules and routes the policy expects
  // that the kernel does not have (someone removed them, or an interface
  // went away).
  static Result<std::vector<RoutingObject>> missing(const Policy& p,
                                                    const std::vector<bool>& failed = {});
  // Deletes the unresolved (INCOMPLETE) neighbour entries of a failed rail's
  // interface; returns how many. Packets routed to the rail just before it
  // was routed around wait in such an entry's queue for address resolution
  // that cannot succeed (up to 3 s), and while a TCP segment waits there,
  // TCP does not retransmit it (TCPSpuriousRtxHostQueues): the connection
  // stalls although its decision and routing have moved. Deleting the entry
  // drops those packets, so TCP retransmits on the new path. Resolved,
  // permanent and noarp entries are not touched.
  static Result<int> drop_unresolved_neighbours(const std::string& ifname);
  // The neighbour entry of `addr` on `ifname` (IPv4 or IPv6): "" if there is
  // none, "incomplete", "failed" (resolution gave up), else "resolved".
  static Result<std::string> neighbour_state(const IpAddr& addr, const std::string& ifname);
};

}  // namespace dp
