// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/police.h"

#include <algorithm>

namespace dp {

std::vector<RailPolice> plan_police(const Policy& p, const std::vector<Shares>& written,
                                    const std::vector<bool>& carried) {
  std::vector<RailPolice> out(p.paths.size());
  for (size_t path = 0; path < p.paths.size(); ++path) {
    const uint64_t cap = p.paths[path].capacity_bps;
    auto& r = out[path];
    for (size_t c = 0; c < p.classes.size(); ++c) {
      bool here = c < written.size() && path < written[c].size() && written[c][path] > 0;
      bool active = c < carried.size() && carried[c];
      if (here && active) r.reserved_bps += p.classes[c].reserve_on(cap);
    }
    if (!r.reserved_bps) continue;
    // the policy keeps the sum below every rail's capacity; a floor of 1%
    // anyway, so that a rail's own classes are never cut off
    r.rate_bps = std::max(cap > r.reserved_bps ? cap - r.reserved_bps : 0, cap / 100);
    r.policed.assign(p.classes.size(), false);
    for (size_t c = 0; c < p.classes.size(); ++c) r.policed[c] = p.classes[c].reserve_on(cap) == 0;
  }
  return out;
}

uint64_t police_burst_bytes(uint64_t rate_bps) {
  return std::max<uint64_t>(rate_bps / 8 / 100, 256u << 10);
}

}  // namespace dp
