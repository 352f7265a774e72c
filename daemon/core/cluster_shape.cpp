// SPDX-License-Identifier: Apache-2.0
// Rendering a cluster description, stages 1 and 2 (cluster_stages.h): the
// parse and the description's shape, its groups, and its nodes.
#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>
#include <set>

#include "dualpath/core/cluster_stages.h"
#include "dualpath/core/policy_schema.h"
#include "dualpath/core/policy_toml.h"

namespace dp::cluster {

const std::vector<std::string_view>& policy_sections() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const auto& s : schema::sections())
      if (s.node_settings) out.push_back(s.name);
    return out;
  }();
  return names;
}

namespace {

std::vector<std::string> names_of(std::initializer_list<std::string_view> l) {
  return {l.begin(), l.end()};
}

void only_keys(Diags& d, const toml::table& t, const std::vector<std::string>& allowed,
               const std::string& section, const std::string& node = "") {
  for (auto& [k, v] : t) {
    if (std::find(allowed.begin(), allowed.end(), k.str()) != allowed.end()) continue;
    d.error(v, node,
            fmt::format("unknown key \"{}\" in {}{} (allowed: {})", k.str(), section,
                        hint(std::string(k.str()), allowed), joined(allowed)));
  }
}

const toml::array* tables(Diags& d, const toml::table& root, std::string_view key) {
  const toml::node* n = root.get(key);
  if (!n) return nullptr;
  auto* a = n->as_array();
  if (!a || !a->is_array_of_tables()) {
    d.error(*n, "", fmt::format("\"{}\" must be written as [[{}]] sections", key, key));
    return nullptr;
  }
  return a;
}

void check_cluster_table(Diags& d, const toml::table& root, Shape& s) {
  auto* cluster = root.get_as<toml::table>("cluster");
  if (!cluster) {
    d.error(root, "", "a cluster description needs a [cluster] section with its name");
    return;
  }
  s.has_cluster = true;
  only_keys(d, *cluster, names_of({"name", "topology", "default_class"}), "[cluster]");
  if (auto n = name_of(*cluster); !n)
    d.error(*cluster, "", "[cluster] is missing the required key \"name\"");
  else if (auto bad = name_problem("cluster", *n); !bad.empty())
    d.error(*cluster->get("name"), "", bad);
  else
    s.cluster = *n;
  if (auto* t = cluster->get_as<std::string>("topology"); t && t->get() == "separate")
    s.topology = Topology::Separate;
}

// A [[path]]'s network or network6: an IPv4 or IPv6 network with no host bits.
std::optional<Prefix> rail_network(Diags& d, const toml::table& t, const std::string& path,
                                   int fam) {
  auto key = fam == AF_INET ? "network" : "network6";
  auto* s = t.get(key);
  if (!s) return std::nullopt;
  auto p = s->as_string() ? Prefix::parse(s->as_string()->get()) : std::nullopt;
  if (!p || p->addr.family != fam || p->len == (fam == AF_INET ? 32 : 128) ||
      host_part(*p, p->addr) != 0) {
    d.error(*s, "",
            fmt::format("{} of path \"{}\" must be an {} network such as \"{}\" (its "
                        "address with no host bits)",
                        key, path, fam == AF_INET ? "IPv4" : "IPv6",
                        fam == AF_INET ? "192.168.10.0/24" : "fd00:10::/64"));
    return std::nullopt;
  }
  return p;
}

void check_paths(Diags& d, const toml::table& root, Shape& s) {
  auto path_keys = names_of({"name", "interface", "gateway", "gateway6", "capacity", "table",
                             "fwmark", "routes", "bfd_peer", "network", "network6"});
  auto* a = tables(d, root, "path");
  if (!a) return;
  for (auto& e : *a) {
    auto& t = *e.as_table();
    for (std::string_view k : {"source", "source6"})
      if (auto* src = t.get(k))
        d.error(*src, "",
                fmt::format("\"{}\" is a node's own: give the path a network and each node a "
                            "host number, or write the node's addresses",
                            k));
    only_keys(d, t, path_keys, "a [[path]] of a cluster description");
    auto n = name_of(t);
    if (!n) {
      d.error(t, "", "[[path]] is missing the required key \"name\"");
      continue;
    }
    s.paths.push_back({*n, rail_network(d, t, *n, AF_INET), rail_network(d, t, *n, AF_INET6)});
  }
}

// A [[group.path]] or [[group.class]] (or a node's) of `what`.
void check_override_entry(Diags& d, const toml::node& e, std::string_view key,
                          const std::string& what, const std::vector<std::string>& paths,
                          const std::string& node) {
  auto name = name_of(*e.as_table());
  if (!name) {
    d.error(e, node,
            fmt::format("a {} override in {} needs the name of the {} it changes", key, what, key));
  } else if (key == "path" && std::find(paths.begin(), paths.end(), *name) == paths.end()) {
    d.error(e, node,
            fmt::format("{} overrides path \"{}\", which the description does not have{}", what,
                        *name, hint(*name, paths)));
  } else if (key == "path") {
    for (std::string_view k : {"source", "source6", "network", "network6"})
      if (auto* s = e.as_table()->get(k))
        d.error(*s, node,
                fmt::format("\"{}\" cannot be overridden: write the node's addresses", k));
  }
}

// The keys of a [[group]] or [[node]]: its own (`allowed`) and overrides.
void check_overrides(Diags& d, const toml::table& t, const std::string& what,
                     std::vector<std::string> allowed, const std::vector<std::string>& paths,
                     const std::string& node) {
  // besides its own keys: default_class, the policy's sections, paths and classes
  allowed.emplace_back("default_class");
  allowed.insert(allowed.end(), policy_sections().begin(), policy_sections().end());
  allowed.insert(allowed.end(), {"path", "class"});
  only_keys(d, t, allowed, what, node);
  for (auto sec : policy_sections())
    if (auto* n = t.get(sec); n && !n->is_table())
      d.error(*n, node, fmt::format("\"{}\" in {} must be a table", sec, what));
  for (std::string_view key : {"path", "class"}) {
    const toml::node* n = t.get(key);
    if (!n) continue;
    auto* a = n->as_array();
    if (!a || !a->is_array_of_tables()) {
      d.error(*n, node, fmt::format("\"{}\" in {} must be [[...{}]] entries", key, what, key));
      continue;
    }
    for (auto& e : *a) check_override_entry(d, e, key, what, paths, node);
  }
}

// A node's name: valid, or an error quoting it at its own line.
std::optional<std::string> node_name(Diags& d, const toml::table& t) {
  const toml::node* n = t.get("name");
  auto* s = n ? n->as_string() : nullptr;
  if (!s) {
    d.error(n ? *n : t, "", "[[node]] needs a name of 1-31 characters of a-z, 0-9, '-' or '_'");
    return std::nullopt;
  }
  if (valid_name(s->get())) return s->get();
  bool dotted = s->get().find('.') != std::string::npos && valid_hostname(s->get());
  d.error(*n, "",
          name_problem("node", s->get()) +
              (dotted ? ": give the node a short name, and this one as its \"hostname\"" : ""));
  return std::nullopt;
}

// The node's group, hostname and host number.
void read_node_keys(Diags& d, const toml::table& t, NodeEntry& ne,
                    const std::vector<std::string>& groups) {
  if (auto* g = t.get("group")) {
    auto s = g->as_string();
    if (!s || std::find(groups.begin(), groups.end(), s->get()) == groups.end())
      d.error(*g, ne.name,
              s ? fmt::format("no group \"{}\" in the description{}{}", s->get(),
                              hint(s->get(), groups),
                              groups.empty() ? "" : " (groups: " + joined(groups) + ")")
                : std::string("\"group\" must be a group's name"));
    else
      ne.group = s->get();
  }
  if (auto* h = t.get("hostname")) {
    auto s = h->as_string();
    if (!s || !valid_hostname(s->get()))
      d.error(*h, ne.name,
              fmt::format("hostname {} must be a host's name as DNS has it: up to 253 characters, "
                          "labels of 1-63 of a-z, 0-9 and '-' joined by dots (such as "
                          "\"ip-10-0-1-23.ec2.internal\")",
                          s ? fmt::format("\"{}\"", s->get()) : render_toml_value(*h)));
    else
      ne.hostname = s->get();
  }
  if (auto* h = t.get("host"); h && (!h->is_integer() || h->as_integer()->get() < 1))
    d.error(*h, ne.name, "\"host\" must be a positive integer: the node's number on every rail");
  else if (h)
    ne.host = h->as_integer()->get();
}

// Names and hostnames are one namespace: `render --node` takes either.
void check_unique(Diags& d, const std::vector<NodeEntry>& nodes) {
  std::map<std::string, const NodeEntry*> seen;
  for (auto& ne : nodes) {
    if (ne.name.empty()) continue;
    if (auto [it, fresh] = seen.try_emplace(ne.name, &ne); !fresh)
      d.error(*ne.table->get("name"), "",
              it->second->name == ne.name ? fmt::format("duplicate node \"{}\"", ne.name)
                                          : fmt::format("node name \"{}\" is node {}'s hostname",
                                                        ne.name, it->second->name));
    if (ne.hostname.empty() || ne.hostname == ne.name) continue;
    if (auto [it, fresh] = seen.try_emplace(ne.hostname, &ne); !fresh)
      d.error(*ne.table->get("hostname"), ne.name,
              fmt::format("hostname \"{}\" is already node {}'s {}", ne.hostname, it->second->name,
                          it->second->name == ne.hostname ? "name" : "hostname"));
  }
}

}  // namespace

void Diags::error(const toml::node& at, const std::string& n, std::string msg) {
  auto& r = at.source();
  add({file, static_cast<int>(r.begin.line), static_cast<int>(r.begin.column),
       n.empty() ? std::move(msg) : fmt::format("node {}: {}", n, msg)},
      n);
}

void Diags::add(Diagnostic e, const std::string& n) {
  list.push_back(std::move(e));
  node.push_back(n);
}

std::optional<std::string> name_of(const toml::table& t) {
  if (auto* s = t.get_as<std::string>("name")) return s->get();
  return std::nullopt;
}

toml::table* entry_named(toml::array& a, const std::string& name) {
  for (auto& e : a)
    if (auto* t = e.as_table(); t && name_of(*t) == name) return t;
  return nullptr;
}

std::string hint(const std::string& word, const std::vector<std::string>& names) {
  auto near = nearest_name(word, names);
  return near ? fmt::format("; did you mean \"{}\"?", *near) : "";
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string> Shape::path_names() const {
  std::vector<std::string> out;
  for (auto& p : paths) out.push_back(p.name);
  return out;
}

const Rail* Shape::path(const std::string& name) const {
  for (auto& p : paths)
    if (p.name == name) return &p;
  return nullptr;
}

std::optional<toml::table> parse_description(const std::string& text, const std::string& file,
                                             std::vector<Diagnostic>& errors) {
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    errors.push_back({file, static_cast<int>(e.source().begin.line),
                      static_cast<int>(e.source().begin.column), std::string(e.description())});
    return std::nullopt;
  }
}

// The description's shape; what is inside a policy section is checked by
// the policy checks, per node.
Shape check_shape(Diags& d, const toml::table& root) {
  Shape s;
  std::vector<std::string> top = {"cluster"};
  top.insert(top.end(), policy_sections().begin(), policy_sections().end());
  top.insert(top.end(), {"path", "class", "group", "node"});
  only_keys(d, root, top, "the top level of a cluster description");
  check_cluster_table(d, root, s);
  for (auto sec : policy_sections())
    if (auto* n = root.get(sec); n && !n->is_table())
      d.error(*n, "", fmt::format("\"{}\" must be a [{}] section", sec, sec));
  check_paths(d, root, s);
  return s;
}

std::vector<std::string> resolve_groups(Diags& d, const toml::table& root, const Shape& shape) {
  std::vector<std::string> groups;
  std::set<std::string> seen;
  auto* a = tables(d, root, "group");
  if (!a) return groups;
  auto paths = shape.path_names();
  for (auto& e : *a) {
    auto& t = *e.as_table();
    auto n = name_of(t);
    if (!n || !valid_name(*n)) {
      d.error(t, "", "[[group]] needs a name of 1-31 characters of a-z, 0-9, '-' or '_'");
      continue;
    }
    if (!seen.insert(*n).second)
      d.error(*t.get("name"), "", fmt::format("duplicate group \"{}\"", *n));
    groups.push_back(*n);
    check_overrides(d, t, fmt::format("group \"{}\"", *n), {"name"}, paths, "");
  }
  return groups;
}

std::vector<NodeEntry> read_nodes(Diags& d, toml::table& root, const Shape& shape,
                                  const std::vector<std::string>& groups) {
  std::vector<NodeEntry> nodes;
  const toml::node* nodes_node = root.get("node");
  if (nodes_node && nodes_node->is_table()) {
    d.error(*nodes_node, "",
            "[node] is a policy section: in a cluster description the nodes are [[node]] "
            "entries, and the policy's [node] keys topology and default_class are in [cluster]");
    return nodes;
  }
  if (!tables(d, root, "node")) {
    if (d.list.empty()) d.error(root, "", "the description has no [[node]] entries");
    return nodes;
  }
  auto paths = shape.path_names();
  for (auto& e : *root.get_as<toml::array>("node")) {
    auto& t = *e.as_table();
    size_t errors_before = d.list.size();
    NodeEntry ne;
    ne.table = &t;
    auto name = node_name(d, t);
    if (!name) {  // nothing else of it is checked: no name to report it by
      ne.broken = true;
      nodes.push_back(std::move(ne));
      continue;
    }
    ne.name = *name;
    read_node_keys(d, t, ne, groups);
    check_overrides(d, t, fmt::format("node \"{}\"", ne.name),
                    {"name", "hostname", "group", "host", "addresses"}, paths, ne.name);
    ne.broken = d.list.size() > errors_before;
    nodes.push_back(std::move(ne));
  }
  check_unique(d, nodes);
  return nodes;
}

bool valid_hostname(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = std::min(s.find('.', start), s.size());
    size_t len = end - start;
    if (len < 1 || len > 63 || s[start] == '-' || s[end - 1] == '-') return false;
    for (size_t i = start; i < end; ++i)
      if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
        return false;
    start = end + 1;
  }
  return true;
}

const NodeEntry* find_node(const std::vector<NodeEntry>& nodes, const std::string& name) {
  for (auto& n : nodes)
    if (!n.name.empty() && (n.name == name || n.hostname == name)) return &n;
  return nullptr;
}

}  // namespace dp::cluster
