// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the cluster description's parser and the render, on any bytes.
// A description comes from git and is rendered on every node of a fleet (a
// Kubernetes init container renders its own node): every input must end in
// the nodes' policies or in diagnostics with a position, never in a crash or
// a hang; one node rendered alone is the same bytes as in the whole fleet's
// rendering, and each rendered policy reads back as a policy.
#include <cstdint>
#include <string>

#include "dualpath/core/cluster.h"
#include "dualpath/core/policy.h"

namespace {

size_t count(const std::string& s, const std::string& word) {
  size_t n = 0;
  for (auto i = s.find(word); i != std::string::npos; i = s.find(word, i + 1)) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)dp::is_cluster_description(text);
  // A render grows with the nodes (their peer tables with its square): a
  // fleet is a benchmark's input (tests/bench/render_fleet.py), not a
  // fuzzer's, which finds more in many small descriptions than in few large.
  if (count(text, "node") > 64) return 0;
  auto all = dp::render_cluster(text, "fuzz.toml");
  if (!all.ok()) {
    if (!all.nodes.empty() || all.errors.size() > 100000) __builtin_trap();
    for (auto& e : all.errors)
      if (e.file != "fuzz.toml" || e.message.empty()) __builtin_trap();
    return 0;
  }
  if (all.nodes.empty()) __builtin_trap();  // a description without nodes is refused
  for (auto& n : all.nodes) {
    auto again = dp::parse_policy(n.text, n.name + ".toml");
    if (!again.ok() || again.policy->hash != n.hash || again.policy->node != n.name)
      __builtin_trap();
  }
  // the last node alone, by its hostname when it has one
  auto& last = all.nodes.back();
  auto one =
      dp::render_cluster(text, "fuzz.toml", last.hostname.empty() ? last.name : last.hostname);
  if (!one.ok() || one.nodes.size() != 1 || one.nodes[0].text != last.text) __builtin_trap();
  return 0;
}
