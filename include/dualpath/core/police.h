// SPDX-License-Identifier: Apache-2.0
// Reserves (policy key reserve on a class): capacity kept on a rail for the
// classes that have one. While such a class is carried on a rail (its
// decision gives the rail a share and it sent at more than 1% of its
// reserve in a tick of the last second: daemon.cpp note_class_tx), the
// classes without a reserve are policed together there (tc egress,
// bpf/lib/tc.h dp_police_admit) to the rail's capacity less the reserves of
// the classes carried, so that whatever the rail's qdisc or NIC serves
// first (a strict-priority class that failed over from a larger rail) the
// reserved classes keep what they were given. No reserve carried on a rail:
// nothing is policed there. Pure.
#pragma once

#include <cstdint>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/scheduler.h"

namespace dp {

struct RailPolice {
  uint64_t rate_bps = 0;      // what the classes without a reserve may send; 0: not policed
  uint64_t reserved_bps = 0;  // the reserves carried on the rail
  std::vector<bool> policed;  // per policy class
  bool operator==(const RailPolice&) const = default;
};

// Per policy path. written: each class's decision as written (per path);
// carried: per class, whether it sent lately.
std::vector<RailPolice> plan_police(const Policy& p, const std::vector<Shares>& written,
                                    const std::vector<bool>& carried);

// The bucket's depth at a rate: 10 ms of it, and at least 256 KiB, so that
// a TSO burst of 64 KiB segments fits.
uint64_t police_burst_bytes(uint64_t rate_bps);

}  // namespace dp
