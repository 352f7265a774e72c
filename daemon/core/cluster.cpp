// SPDX-License-Identifier: Apache-2.0
// Rendering a cluster description (cluster.h): its stages
// (cluster_stages.h) run in turn, over one parse of the description.
#include "dualpath/core/cluster.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "dualpath/core/cluster_stages.h"

namespace dp {

namespace {

using cluster::Diags;
using cluster::NodeEntry;

// What every node's rendering reads: the parsed description, its shape and
// nodes, the peer table, and each group's hash once made.
struct Fleet {
  toml::table root;
  cluster::Shape shape;
  std::vector<NodeEntry> nodes;
  std::vector<cluster::Peer> peers;
  std::vector<cluster::PeerText> peer_texts;        // each peer's [[peer]] entry as text
  bool peers_read_back = false;                     // with one node's rendering
  std::map<std::string, std::string> group_hashes;  // by group name
};

// The hash of a group's settings: the policy after the group's overrides,
// without the node's name (the same for every node of the group).
std::string group_hash_of(const toml::table& policy) {
  toml::table settings = policy;
  settings.get_as<toml::table>("node")->erase("name");
  return content_hash(cluster::emit_policy(settings, ""));
}

std::optional<RenderedNode> render_node(Diags& d, Fleet& f, const NodeEntry& n) {
  size_t errors_before = d.list.size();
  cluster::Assembly a;
  cluster::assemble_shared(a, f.root, f.shape, n);
  auto [hash, fresh] = f.group_hashes.try_emplace(n.group);
  if (fresh) hash->second = group_hash_of(a.policy);
  cluster::apply_overrides(a, *n.table);
  auto addrs = cluster::address_node(d, n, cluster::written_addresses(d, n, f.shape), f.shape);
  cluster::write_addresses(a, addrs, f.shape);
  cluster::substitute_all(a, cluster::node_vars(n, f.shape.cluster, addrs), d, n.name);
  a.policy.get_as<toml::table>("node")->insert("group_hash", hash->second);
  if (d.list.size() > errors_before) return std::nullopt;  // the checks would repeat them
  bool peers = false;
  if (f.shape.topology == Topology::Separate)
    if (auto entries = cluster::peer_entries(f.peers, n.name); !entries.empty()) {
      a.policy.insert("peer", std::move(entries));
      peers = true;
    }
  cluster::check_node_policy(d, a.policy, n);
  if (!d.list.empty()) return std::nullopt;  // nothing is rendered
  a.policy.erase("peer");                    // written from their text, made once
  cluster::NodeText with{f.shape.cluster, hash->second, "", peers && !f.peers_read_back};
  if (peers) with.peers = cluster::peer_tail(f.peer_texts, n.name);
  f.peers_read_back = f.peers_read_back || peers;
  return cluster::write_node(d, a.policy, n, with);
}

void render_nodes(Diags& d, Fleet& f, ClusterRender& out) {
  // the addresses written out for each node, for the others' peer tables
  // (their errors are reported with the node's own rendering)
  Diags quiet{d.file, {}, {}};
  std::vector<cluster::WrittenAddresses> written;
  for (auto& n : f.nodes)
    written.push_back(n.name.empty() ? cluster::WrittenAddresses{}
                                     : cluster::written_addresses(quiet, n, f.shape));
  f.peers = cluster::peer_table(f.nodes, written, f.shape);
  f.peer_texts = cluster::peer_texts(cluster::peer_entries(f.peers, ""));
  for (auto& n : f.nodes)
    if (!n.broken)
      if (auto r = render_node(d, f, n)) out.nodes.push_back(std::move(*r));
}

// Only the node named (or whose hostname is) `only`, or a refusal with the
// nearest name.
void select_node(ClusterRender& out, const std::vector<NodeEntry>& nodes, const std::string& only) {
  if (auto* n = cluster::find_node(nodes, only)) {
    std::erase_if(out.nodes, [&](auto& r) { return r.name != n->name; });
    return;
  }
  std::vector<std::string> names;
  for (auto& n : nodes) {
    names.push_back(n.name);
    if (!n.hostname.empty()) names.push_back(n.hostname);
  }
  out.nodes.clear();
  out.errors.push_back({out.file, 0, 0,
                        fmt::format("node {} is not in the description{} ({} nodes)", only,
                                    cluster::hint(only, names), nodes.size())});
}

}  // namespace

bool is_cluster_description(const std::string& text) {
  try {
    toml::table root = toml::parse(text, std::string_view{"<text>"});
    return root.get_as<toml::table>("cluster") != nullptr;
  } catch (const toml::parse_error&) {
    // one with a mistake in its TOML (a section written twice): its
    // [cluster] header says what it is, and its reader reports the mistake
    static const std::regex header(
        R"((^|\n)[ \t]*\[[ \t]*cluster[ \t]*\][ \t]*(#[^\n]*)?(\r?\n|$))");
    return std::regex_search(text, header);
  }
}

ClusterRender render_cluster(const std::string& text, const std::string& file,
                             const std::optional<std::string>& only) {
  ClusterRender out;
  out.file = file;
  out.hash = content_hash(text);
  Fleet f;
  if (auto root = cluster::parse_description(text, file, out.errors))
    f.root = std::move(*root);
  else
    return out;
  Diags d{file, {}, {}};
  f.shape = cluster::check_shape(d, f.root);
  out.cluster = f.shape.cluster;
  out.groups = cluster::resolve_groups(d, f.root, f.shape);
  f.nodes = cluster::read_nodes(d, f.root, f.shape, out.groups);
  if (f.shape.has_cluster) render_nodes(d, f, out);
  out.errors = cluster::group_errors(std::move(d.list), d.node);
  if (!out.errors.empty()) {
    out.nodes.clear();
    return out;
  }
  if (only) select_node(out, f.nodes, *only);
  return out;
}

ClusterRender load_cluster_file(const std::string& path, const std::optional<std::string>& only) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ClusterRender out;
    out.file = path;
    out.errors.push_back(
        {path, 0, 0, fmt::format("cannot read the file: {}", std::strerror(errno))});
    return out;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return render_cluster(ss.str(), path, only);
}

}  // namespace dp
