// SPDX-License-Identifier: Apache-2.0
// A cluster description (dualpath-cluster(5)): one TOML file for a fleet's
// rails, classes and scheduler, its groups of nodes with their overrides,
// and its nodes with their names and addresses. dpctl policy render makes
// every node's policy (dualpath-policy(5)) from it. Pure: no I/O but the
// file read by load_cluster_file.
//
// A node's policy is the description's policy sections, then its group's
// overrides, then its own. Sections merge key by key; [[path]] and
// [[class]] entries merge by name (an override's class of a new name is
// added); every other value, arrays included, is replaced whole. Each
// rendered policy is checked as dualpathd would check it, and an error
// names the description's file and line and the node.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/policy.h"

namespace dp {

struct RenderedNode {
  std::string name;
  std::string group;       // "" when the node is in no group
  std::string text;        // its policy, byte-for-byte the same for the same description
  std::string hash;        // content_hash(text): what dualpathd reports running
  std::string group_hash;  // of its group's settings (the description before node overrides)
  std::string hostname;    // its DNS name as the description gives it; "" when none
};

struct ClusterRender {
  std::string file;
  std::string cluster;  // [cluster] name
  std::string hash;     // content hash of the description's bytes
  std::vector<std::string> groups;
  std::vector<RenderedNode> nodes;  // in the description's order
  std::vector<Diagnostic> errors;   // "file:line:col: error: node NAME: ..."
  bool ok() const { return errors.empty(); }
};

// A cluster description rather than a policy: a TOML document with a
// [cluster] table, or text that is not valid TOML but has a [cluster]
// header line (its reader then reports the mistake with its line).
bool is_cluster_description(const std::string& text);

// Every node's policy, or only the node named `only` (its name or its
// hostname; refused, with the nearest name, when the description does not
// hold it). Every node is checked either way: nothing is rendered when any
// node has an error.
ClusterRender render_cluster(const std::string& text, const std::string& file,
                             const std::optional<std::string>& only = std::nullopt);
ClusterRender load_cluster_file(const std::string& path,
                                const std::optional<std::string>& only = std::nullopt);

}  // namespace dp
