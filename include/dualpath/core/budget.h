// SPDX-License-Identifier: Apache-2.0
// dpctl budget: the bandwidth arithmetic of reference articles 000 and 001,
// done before anyone blames the network. A planned load is concurrency x
// per-request rate x amplification (sharding, replicas, protocol) x
// headroom; laid on the rails the policy prefers for each class, it shows
// how much of each rail the plan needs and which class the scheduler would
// spill first. The KV-cache estimate is the article's
//   2 x layers x KV heads x head dimension x bytes per element x tokens
// per sequence (a capacity estimate, not an allocation). Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/protocol.h"
#include "dualpath/core/result.h"

namespace dp {

struct BudgetLoad {
  std::string klass;  // a class of the policy, or "" (no rail to lay it on)
  double concurrency = 1;
  double per_request_bps = 0;  // bits per second per request
  double amplification = 1;
  int line = 0;
};

struct KvSpec {
  uint64_t layers = 0, kv_heads = 0, head_dim = 0;
  double bytes_per_element = 2;
  uint64_t tokens = 0;     // per sequence (input + output)
  uint64_t sequences = 1;  // resident at once
};

struct BudgetPlan {
  std::vector<BudgetLoad> loads;
  double headroom = 1;
  std::optional<KvSpec> kv;
};

// A rate: bytes ("18MB/s", "1.5GiB/s": SI or binary prefixes) or bits
// ("5Gbit", "5Gbit/s"), as bits per second.
Result<double> parse_rate(std::string_view text);

// The plan as a TOML file: headroom, [[load]] (class, concurrency,
// per_request, amplification) and [kv] (layers, kv_heads, head_dim,
// bytes_per_element, tokens, sequences). Errors as file:line:column.
Result<BudgetPlan> parse_budget(const std::string& text, const std::string& name);

// The arithmetic, with the rails of `policy` when given: per load its demand,
// per rail its planned utilisation against capacity and load_threshold, the
// first class to spill, and the KV-cache size.
json compute_budget(const BudgetPlan& plan, const Policy* policy);

}  // namespace dp
