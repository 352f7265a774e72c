// SPDX-License-Identifier: Apache-2.0
// The stages of rendering a cluster description (dualpath-cluster(5)), in
// their order, each a pure function over the parsed description that
// render_cluster (cluster.h) runs in turn:
//   1. parse and shape: the TOML, [cluster], the top-level keys, the rails;
//   2. resolve groups, and read the nodes (names, hostnames, groups);
//   3. address nodes: host numbers and written-out addresses;
//   4. the peer table: the nodes whose addresses are written out;
//   5. placeholders in string values;
//   6. assemble each node's policy from the one parse, run the policy's
//      checks on it and write it out;
//   7. group the errors: one error shared by many nodes is reported once.
// Every stage adds its errors to a Diags, each with the node it is about.
// Declared here for render_cluster and the unit tests; callers use
// cluster.h.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dualpath/core/cluster.h"
#include "dualpath/core/policy.h"

namespace dp::cluster {

// Errors, each with the node it is about ("" for none).
struct Diags {
  std::string file;
  std::vector<Diagnostic> list;
  std::vector<std::string> node;
  // An error at `at`'s line; "node NAME: " before it when `node` is set.
  void error(const toml::node& at, const std::string& node, std::string msg);
  void add(Diagnostic e, const std::string& node);
};

// The policy's sections that a description holds for every node, and that a
// group or a node may override: those the policy's schema declares as node
// settings (policy_schema.h), in its order.
const std::vector<std::string_view>& policy_sections();

// Helpers the stages share.
std::optional<std::string> name_of(const toml::table& t);
toml::table* entry_named(toml::array& a, const std::string& name);
std::string hint(const std::string& word, const std::vector<std::string>& names);
std::string joined(const std::vector<std::string>& v);

// 1. Parse and shape.
struct Rail {
  std::string name;
  std::optional<Prefix> net4, net6;  // its network and network6
};
struct Shape {
  bool has_cluster = false;  // a [cluster] table: without one nothing is rendered
  std::string cluster;       // its name; "" when missing or invalid
  Topology topology = Topology::Shared;
  std::vector<Rail> paths;  // in the description's order
  std::vector<std::string> path_names() const;
  const Rail* path(const std::string& name) const;
};
// The parsed description, or its syntax error in `errors`.
std::optional<toml::table> parse_description(const std::string& text, const std::string& file,
                                             std::vector<Diagnostic>& errors);
// [cluster], the top-level keys and sections, and the [[path]] entries.
Shape check_shape(Diags& d, const toml::table& root);

// 2. Groups and nodes.
// The [[group]] names in order, each group's overrides checked.
std::vector<std::string> resolve_groups(Diags& d, const toml::table& root, const Shape& shape);
struct NodeEntry {
  std::string name;      // "" when its entry has no valid name
  std::string hostname;  // "" when none
  std::string group;     // "" when in no group
  std::optional<int64_t> host;
  toml::table* table = nullptr;  // its [[node]] entry in the parsed description
  bool broken = false;           // its entry has errors of its own: not rendered
};
// Every [[node]] entry, in order (an entry with an invalid name too, marked
// broken, so that asking for it names its error).
std::vector<NodeEntry> read_nodes(Diags& d, toml::table& root, const Shape& shape,
                                  const std::vector<std::string>& groups);
// A hostname as inventories and Kubernetes have them: up to 253
// characters, dot-separated labels of 1-63 of a-z, 0-9 and '-' (not first
// or last).
bool valid_hostname(const std::string& s);
// The node named `name`, or whose hostname is `name`; nullptr if none.
const NodeEntry* find_node(const std::vector<NodeEntry>& nodes, const std::string& name);

// 3. Addresses.
// The network's address plus `host`; none when it does not fit (0 is the
// network itself, and all ones IPv4's broadcast).
std::optional<IpAddr> host_address(const Prefix& net, int64_t host);
// The host part of `a` in `net` (its low bits, up to 64).
uint64_t host_part(const Prefix& net, const IpAddr& a);
struct Written {
  IpAddr addr;
  const toml::node* at = nullptr;  // where it is written
};
using WrittenAddresses = std::map<std::string, std::vector<Written>>;  // by path name
// A node's `addresses = { roce = "192.168.10.17", eth = [...] }`, checked.
WrittenAddresses written_addresses(Diags& d, const NodeEntry& n, const Shape& shape);
struct NodeAddress {
  std::string path;
  std::optional<IpAddr> v4, v6;
};
// The node's source addresses on each rail, in the description's path
// order: written out, or the rail's network plus the host number.
std::vector<NodeAddress> address_node(Diags& d, const NodeEntry& n, const WrittenAddresses& w,
                                      const Shape& shape);

// 4. The peer table: nodes whose addresses are written out are in every
// other node's (the separate topology's connect-time placement finds them
// on another rail by it, not by their host part).
struct Peer {
  std::string name;
  // its addresses as written in a policy, by path, in path order
  std::vector<std::pair<std::string, std::vector<std::string>>> by_path;
};
std::vector<Peer> peer_table(const std::vector<NodeEntry>& nodes,
                             const std::vector<WrittenAddresses>& written, const Shape& shape);
// The [[peer]] entries of node `self`'s policy: every peer but itself.
toml::array peer_entries(const std::vector<Peer>& peers, const std::string& self);

// 5. Placeholders.
using Vars = std::map<std::string, std::string>;
// {node}, {group}, {cluster}, {host}, {source.PATH}, {source6.PATH}.
Vars node_vars(const NodeEntry& n, const std::string& cluster,
               const std::vector<NodeAddress>& addrs);
// `s` with its placeholders replaced ({{ and }} are braces); none, and
// `problem` set, when one is unknown or has no value.
std::optional<std::string> substitute(const std::string& s, const Vars& vars, std::string& problem);

// 6. Assembly. A node's policy is assembled by moving values out of the
// one parsed description (so each keeps its file and line for the
// policy's checks), and the Journal moves them back afterwards, leaving the
// description as parsed for the next node.
class Journal {
 public:
  Journal() = default;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal() { restore(); }
  // into[key] = from[key], moved; what into held is kept.
  void move(toml::table& into, const std::string& key, toml::table& from);
  // into[key] = v, a value the renderer made.
  void set(toml::table& into, const std::string& key, toml::node&& v);
  void erase(toml::table& t, const std::string& key);
  // from[i] moved to the end of into.
  void append(toml::array& into, toml::array& from, size_t i);
  void set_string(toml::value<std::string>& s, std::string v);
  // Undoes every change, newest first.
  void restore();

 private:
  enum class Kind { Move, Set, Erase, Append, String };
  struct Entry {
    Kind kind;
    toml::node* into;  // a table, an array or a string
    toml::node* from;  // Move's table, Append's array
    std::string key;   // Move, Set, Erase; String's old value
    size_t index = 0;  // Append's index in from
    std::optional<size_t> held;
  };
  std::optional<size_t> hold(toml::table& t, const std::string& key);
  std::vector<Entry> log_;
  toml::array held_;  // values displaced, until restored
};
// A policy being assembled, and the journal that gives its values back.
struct Assembly {
  toml::table policy;
  Journal journal;
  Assembly() = default;
  Assembly(const Assembly&) = delete;
  Assembly& operator=(const Assembly&) = delete;
  ~Assembly() { journal.restore(); }  // before policy is destroyed
};
// The shared sections, [node] from [cluster], and the group's overrides.
void assemble_shared(Assembly& a, toml::table& root, const Shape& shape, const NodeEntry& n);
// A group's or a node's overrides (`over`) applied to the policy.
void apply_overrides(Assembly& a, toml::table& over);
// Each path's source and source6 from `addrs`, and routes from its networks.
void write_addresses(Assembly& a, const std::vector<NodeAddress>& addrs, const Shape& shape);
// Placeholders replaced in every string of the policy; an error for each
// that cannot be.
void substitute_all(Assembly& a, const Vars& vars, Diags& d, const std::string& node);
// The policy as text: [node], the sections in the policy's order, then
// [[path]], [[class]] and [[peer]]; "name" first in an entry.
std::string emit_policy(const toml::table& p, const std::string& header);
// The policy's checks, as the node's dualpathd runs them; an error in a
// value the renderer made is at the node's line.
void check_node_policy(Diags& d, const toml::table& policy, const NodeEntry& n);
// The [[peer]] entries (peer_entries) as text, each once: every node's
// policy ends with all of them but its own.
struct PeerText {
  std::string name, text;
};
std::vector<PeerText> peer_texts(const toml::array& entries);
std::string peer_tail(const std::vector<PeerText>& peers, const std::string& self);
// What a node's text is made with besides its policy.
struct NodeText {
  std::string cluster, group_hash;
  std::string peers;             // its peer_tail, written after the policy
  bool read_back_peers = false;  // read the peers back too (else the policy's own part)
};
// The node's policy (without [[peer]]) as text, its peers after it, read
// back as dualpathd will read it. The peers, the same bytes in every node's
// policy but its own entry, need reading back once per rendering, not once
// per node.
std::optional<RenderedNode> write_node(Diags& d, const toml::table& policy, const NodeEntry& n,
                                       const NodeText& with);

// 7. Errors: one shared by many nodes is reported once ("nodes a, b, c and
// 4 more: ..."), then all in line order.
std::vector<Diagnostic> group_errors(std::vector<Diagnostic> list,
                                     const std::vector<std::string>& node_of);

}  // namespace dp::cluster
