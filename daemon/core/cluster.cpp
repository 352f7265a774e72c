// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/cluster.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "dualpath/core/policy_toml.h"

namespace dp {

namespace {

// The policy's sections that a description holds for every node, and that a
// group or a node may override.
constexpr std::string_view kSections[] = {"routing", "scheduler", "health", "measurement",
                                          "metrics", "responder", "qos"};
// What a [[group]] or [[node]] entry may override, besides its own keys.
constexpr std::string_view kOverrides[] = {"default_class", "routing", "scheduler", "health",
                                           "measurement",   "metrics", "responder", "qos",
                                           "path",          "class"};
// Keys of a description's [[path]] that are not the policy's: the rail's
// networks, where a node's address is found by its host number.
constexpr std::string_view kPathOnly[] = {"network", "network6"};

struct Diags {
  std::string file;
  std::vector<Diagnostic> list;
  std::vector<std::string> node;  // the node each error is of, "" for none
  void error(const toml::node& at, const std::string& n, std::string msg) {
    auto& r = at.source();
    add({file, static_cast<int>(r.begin.line), static_cast<int>(r.begin.column),
         n.empty() ? std::move(msg) : fmt::format("node {}: {}", n, msg)},
        n);
  }
  void add(Diagnostic e, const std::string& n) {
    list.push_back(std::move(e));
    node.push_back(n);
  }
};

std::vector<std::string> names_of(std::initializer_list<std::string_view> l) {
  return {l.begin(), l.end()};
}
template <size_t N>
std::vector<std::string> names_of(const std::string_view (&a)[N]) {
  return {std::begin(a), std::end(a)};
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

std::optional<std::string> name_of(const toml::table& t) {
  if (auto* s = t.get_as<std::string>("name")) return s->get();
  return std::nullopt;
}

toml::table* entry_named(toml::array& a, const std::string& name) {
  for (auto& e : a)
    if (auto* t = e.as_table(); t && name_of(*t) == name) return t;
  return nullptr;
}

// A node's address on a rail: the network's address plus the host number.
std::optional<IpAddr> host_address(const Prefix& net, int64_t host) {
  bool v4 = net.addr.family == AF_INET;
  int bits = (v4 ? 32 : 128) - net.len;
  // 0 is the network itself, and all ones IPv4's broadcast
  if (host < 1 || (bits < 63 && host >= (int64_t{1} << bits) - (v4 && bits >= 2 ? 1 : 0)))
    return std::nullopt;
  IpAddr a = net.addr;
  auto h = static_cast<uint64_t>(host);
  for (size_t i = v4 ? 4 : 16; i-- > 0 && h;) {
    unsigned sum = a.bytes[i] + static_cast<unsigned>(h & 0xff);
    a.bytes[i] = static_cast<uint8_t>(sum);
    h = (h >> 8) + (sum >> 8);
  }
  return a;
}

// The host part of `a` in `net` (its low bits, up to 64).
uint64_t host_part(const Prefix& net, const IpAddr& a) {
  size_t size = a.family == AF_INET ? 4 : 16;
  int bits = std::min(static_cast<int>(size) * 8 - net.len, 64);
  uint64_t v = 0;
  for (size_t i = size > 8 ? size - 8 : 0; i < size; ++i) v = v << 8 | a.bytes[i];
  return bits >= 64 ? v : v & ((uint64_t{1} << bits) - 1);
}

// Replaces {node}, {group}, {cluster}, {host}, {source.PATH} and
// {source6.PATH} in a string; {{ and }} are braces. Empty optional and
// `problem` set when a placeholder is unknown or has no value.
std::optional<std::string> substitute(const std::string& s,
                                      const std::map<std::string, std::string>& vars,
                                      std::string& problem) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "{{") == 0 || s.compare(i, 2, "}}") == 0) {
      out += s[i++];
      continue;
    }
    if (s[i] != '{') {
      out += s[i];
      continue;
    }
    auto end = s.find('}', i);
    if (end == std::string::npos) {
      problem = "an unclosed '{' (write {{ for a brace)";
      return std::nullopt;
    }
    std::string var = s.substr(i + 1, end - i - 1);
    auto it = vars.find(var);
    if (it == vars.end() || it->second.empty()) {
      std::vector<std::string> known;
      for (auto& [k, v] : vars) known.push_back("{" + k + "}");
      auto near = nearest_name("{" + var + "}", known);
      problem =
          it == vars.end()
              ? fmt::format("unknown placeholder {{{}}}{} (known: {})", var,
                            near ? fmt::format("; did you mean {}?", *near) : "", joined(known))
              : fmt::format("placeholder {{{}}} has no value for this node", var);
      return std::nullopt;
    }
    out += it->second;
    i = end;
  }
  return out;
}

void substitute_all(toml::node& n, const std::map<std::string, std::string>& vars, Diags& d,
                    const std::string& node) {
  if (auto* t = n.as_table()) {
    for (auto& [k, v] : *t) substitute_all(v, vars, d, node);
  } else if (auto* a = n.as_array()) {
    for (auto& e : *a) substitute_all(e, vars, d, node);
  } else if (auto* s = n.as_string()) {
    if (s->get().find_first_of("{}") == std::string::npos) return;
    std::string problem;
    if (auto v = substitute(s->get(), vars, problem))
      s->get() = *v;
    else
      d.error(n, node, fmt::format("\"{}\": {}", s->get(), problem));
  }
}

// Moves every key of `from` into `into`, replacing what is there (toml++
// keeps a node's source region only when it is moved).
void merge_table(toml::table& into, toml::table& from) {
  for (auto& [k, v] : from) {
    std::string key(k.str());
    v.visit([&](auto& x) { into.insert_or_assign(key, std::move(x)); });
  }
}

// Applies a group's or a node's overrides to the policy being assembled.
void apply_overrides(toml::table& policy, toml::table& over) {
  if (auto* v = over.get("default_class"))
    v->visit([&](auto& x) {
      policy["node"].as_table()->insert_or_assign("default_class", std::move(x));
    });
  for (auto sec : kSections) {
    auto* from = over.get_as<toml::table>(sec);
    if (!from) continue;
    if (!policy.get_as<toml::table>(sec)) policy.insert_or_assign(sec, toml::table{});
    merge_table(*policy.get_as<toml::table>(sec), *from);
  }
  for (std::string_view key : {"path", "class"}) {
    auto* from = over.get_as<toml::array>(key);
    if (!from) continue;
    if (!policy.get_as<toml::array>(key)) policy.insert_or_assign(key, toml::array{});
    auto& into = *policy.get_as<toml::array>(key);
    for (auto& e : *from) {
      auto* t = e.as_table();
      if (!t) continue;
      auto name = name_of(*t);
      if (auto* have = name ? entry_named(into, *name) : nullptr)
        merge_table(*have, *t);
      else
        into.push_back(std::move(*t));  // a new class (paths were checked to exist)
    }
  }
}

// A policy table as text: [node] first, then the sections in the policy's
// order, then [[path]] and [[class]]; "name" first in an entry, then its
// keys in order; then [[peer]], the other nodes whose addresses are written.
void emit_keys(std::ostringstream& out, const toml::table& t) {
  if (auto* n = t.get("name")) out << "name = " << render_toml_value(*n) << "\n";
  for (auto& [k, v] : t)
    if (k.str() != "name") out << k.str() << " = " << render_toml_value(v) << "\n";
}

std::string emit_policy(const toml::table& p, const std::string& header) {
  std::ostringstream out;
  out << header;
  auto section = [&](std::string_view name) {
    if (auto* t = p.get_as<toml::table>(name)) {
      out << "\n[" << name << "]\n";
      emit_keys(out, *t);
    }
  };
  section("node");
  for (auto s : kSections) section(s);
  for (std::string_view key : {"path", "class", "peer"})
    if (auto* a = p.get_as<toml::array>(key))
      for (auto& e : *a) {
        out << "\n[[" << key << "]]\n";
        emit_keys(out, *e.as_table());
      }
  return out.str();
}

// The addresses written for a node, by path name: `addresses = { roce =
// "192.168.10.17", eth = ["10.20.0.17", "fd00:20::17"] }`.
std::map<std::string, std::vector<std::pair<IpAddr, const toml::node*>>> explicit_addresses(
    Diags& d, const toml::table& node, const std::string& name,
    const std::vector<std::string>& paths) {
  std::map<std::string, std::vector<std::pair<IpAddr, const toml::node*>>> out;
  const toml::node* n = node.get("addresses");
  if (!n) return out;
  auto* t = n->as_table();
  if (!t) {
    d.error(*n, name,
            "\"addresses\" must be a table of path names, such as { roce = \"192.168.10.17\" }");
    return out;
  }
  for (auto& [k, v] : *t) {
    std::string path(k.str());
    if (std::find(paths.begin(), paths.end(), path) == paths.end()) {
      d.error(v, name,
              fmt::format("addresses: no path \"{}\" in the description{} (paths: {})", path,
                          hint(path, paths), joined(paths)));
      continue;
    }
    std::vector<const toml::node*> items;
    if (auto* a = v.as_array())
      for (auto& e : *a) items.push_back(&e);
    else
      items.push_back(&v);
    std::set<int> families;
    for (auto* e : items) {
      auto* s = e->as_string();
      auto a = s ? IpAddr::parse(s->get()) : std::nullopt;
      if (!a) {
        d.error(*e, name,
                fmt::format("addresses.{} must be an IP address or a list of them (one IPv4, one "
                            "IPv6), not {}",
                            path, render_toml_value(*e)));
        continue;
      }
      if (!families.insert(a->family).second) {
        d.error(*e, name,
                fmt::format("addresses.{} has two {} addresses; a rail has one of each", path,
                            a->family == AF_INET ? "IPv4" : "IPv6"));
        continue;
      }
      out[path].push_back({*a, e});
    }
  }
  return out;
}

struct NodeEntry {
  std::string name, group;
  const toml::table* table = nullptr;
  size_t index = 0;
  bool broken = false;  // its entry has errors of its own: not rendered
};

// One error the same for many nodes (a section they share) is reported once:
// "nodes a, b, c and 4 more: ...".
std::vector<Diagnostic> merged(std::vector<Diagnostic> list,
                               const std::vector<std::string>& node_of) {
  struct Key {
    std::string file, message;
    int line, column;
    bool operator<(const Key& o) const {
      return std::tie(file, line, column, message) < std::tie(o.file, o.line, o.column, o.message);
    }
  };
  std::map<Key, std::vector<std::string>> nodes;
  std::vector<Key> order;
  for (size_t i = 0; i < list.size(); ++i) {
    auto& e = list[i];
    std::string prefix = node_of[i].empty() ? "" : "node " + node_of[i] + ": ";
    Key k{e.file, e.message.substr(e.message.rfind(prefix, 0) == 0 ? prefix.size() : 0), e.line,
          e.column};
    auto [it, fresh] = nodes.try_emplace(k);
    if (fresh) order.push_back(k);
    if (!node_of[i].empty()) it->second.push_back(node_of[i]);
  }
  std::vector<Diagnostic> out;
  for (auto& k : order) {
    auto& n = nodes[k];
    std::string who;
    for (size_t i = 0; i < n.size() && i < 3; ++i) who += (i ? ", " : "") + n[i];
    if (n.size() > 3) who += fmt::format(" and {} more", n.size() - 3);
    out.push_back({k.file, k.line, k.column,
                   n.empty()       ? k.message
                   : n.size() == 1 ? fmt::format("node {}: {}", who, k.message)
                                   : fmt::format("nodes {}: {}", who, k.message)});
  }
  return out;
}

}  // namespace

bool is_cluster_description(const std::string& text) {
  try {
    toml::table root = toml::parse(text, std::string_view{"<text>"});
    return root.get_as<toml::table>("cluster") != nullptr;
  } catch (const toml::parse_error&) {
    return false;
  }
}

ClusterRender render_cluster(const std::string& text, const std::string& file,
                             const std::optional<std::string>& only) {
  ClusterRender out;
  out.file = file;
  out.hash = content_hash(text);
  Diags d{file, {}, {}};
  auto parse = [&](toml::table& root) {
    try {
      root = toml::parse(text, file);
      return true;
    } catch (const toml::parse_error& e) {
      out.errors.push_back({file, static_cast<int>(e.source().begin.line),
                            static_cast<int>(e.source().begin.column),
                            std::string(e.description())});
      return false;
    }
  };
  toml::table root;
  if (!parse(root)) return out;

  // The description's shape; what is inside a policy section is checked
  // by the policy checks, per node.
  auto top = names_of({"cluster", "routing", "scheduler", "health", "measurement", "metrics",
                       "responder", "qos", "path", "class", "group", "node"});
  only_keys(d, root, top, "the top level of a cluster description");
  auto* cluster = root.get_as<toml::table>("cluster");
  if (!cluster) {
    d.error(root, "", "a cluster description needs a [cluster] section with its name");
  } else {
    only_keys(d, *cluster, names_of({"name", "topology", "default_class"}), "[cluster]");
    if (auto n = name_of(*cluster); !n)
      d.error(*cluster, "", "[cluster] is missing the required key \"name\"");
    else if (!valid_name(*n))
      d.error(
          *cluster->get("name"), "",
          fmt::format("cluster name \"{}\" must be 1-31 characters of a-z, 0-9, '-' or '_'", *n));
    else
      out.cluster = *n;
  }
  for (auto sec : kSections)
    if (auto* n = root.get(sec); n && !n->is_table())
      d.error(*n, "", fmt::format("\"{}\" must be a [{}] section", sec, sec));

  std::vector<std::string> paths, groups;
  std::vector<std::string> path_keys =
      names_of({"name", "interface", "gateway", "gateway6", "capacity", "table", "fwmark", "routes",
                "bfd_peer", "network", "network6"});
  std::map<std::string, std::pair<std::optional<Prefix>, std::optional<Prefix>>> networks;
  if (auto* a = tables(d, root, "path")) {
    for (auto& e : *a) {
      auto& t = *e.as_table();
      for (std::string_view k : {"source", "source6"})
        if (auto* s = t.get(k))
          d.error(*s, "",
                  fmt::format("\"{}\" is a node's own: give the path a network and each node a "
                              "host number, or write the node's addresses",
                              k));
      only_keys(d, t, path_keys, "a [[path]] of a cluster description");
      auto n = name_of(t);
      if (!n) {
        d.error(t, "", "[[path]] is missing the required key \"name\"");
        continue;
      }
      paths.push_back(*n);
      for (int fam : {AF_INET, AF_INET6}) {
        auto key = fam == AF_INET ? "network" : "network6";
        auto* s = t.get(key);
        if (!s) continue;
        auto p = s->as_string() ? Prefix::parse(s->as_string()->get()) : std::nullopt;
        if (!p || p->addr.family != fam || p->len == (fam == AF_INET ? 32 : 128) ||
            host_part(*p, p->addr) != 0) {
          d.error(*s, "",
                  fmt::format("{} of path \"{}\" must be an {} network such as \"{}\" (its "
                              "address with no host bits)",
                              key, *n, fam == AF_INET ? "IPv4" : "IPv6",
                              fam == AF_INET ? "192.168.10.0/24" : "fd00:10::/64"));
          continue;
        }
        (fam == AF_INET ? networks[*n].first : networks[*n].second) = p;
      }
    }
  }

  auto check_overrides = [&](const toml::table& t, const std::string& what,
                             std::vector<std::string> allowed, const std::string& node) {
    for (auto& k : kOverrides) allowed.emplace_back(k);
    only_keys(d, t, allowed, what, node);
    for (auto sec : kSections)
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
      for (auto& e : *a) {
        auto name = name_of(*e.as_table());
        if (!name) {
          d.error(e, node,
                  fmt::format("a {} override in {} needs the name of the {} it changes", key, what,
                              key));
        } else if (key == "path" && std::find(paths.begin(), paths.end(), *name) == paths.end()) {
          d.error(e, node,
                  fmt::format("{} overrides path \"{}\", which the description does not have{}",
                              what, *name, hint(*name, paths)));
        } else if (key == "path") {
          for (std::string_view k : {"source", "source6", "network", "network6"})
            if (auto* s = e.as_table()->get(k))
              d.error(*s, node,
                      fmt::format("\"{}\" cannot be overridden: write the node's addresses", k));
        }
      }
    }
  };

  std::set<std::string> seen;
  if (auto* a = tables(d, root, "group")) {
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
      check_overrides(t, fmt::format("group \"{}\"", *n), {"name"}, "");
    }
  }
  out.groups = groups;

  std::vector<NodeEntry> nodes;
  seen.clear();
  const toml::node* nodes_node = root.get("node");
  if (nodes_node && nodes_node->is_table())
    d.error(*nodes_node, "",
            "[node] is a policy section: in a cluster description the nodes are [[node]] "
            "entries, and the policy's [node] keys topology and default_class are in [cluster]");
  else if (auto* a = tables(d, root, "node")) {
    for (size_t i = 0; i < a->size(); ++i) {
      auto& t = *a->get(i)->as_table();
      auto n = name_of(t);
      if (!n || !valid_name(*n)) {
        d.error(t, "", "[[node]] needs a name of 1-31 characters of a-z, 0-9, '-' or '_'");
        continue;
      }
      if (!seen.insert(*n).second)
        d.error(*t.get("name"), "", fmt::format("duplicate node \"{}\"", *n));
      size_t errors_before = d.list.size();
      NodeEntry ne{*n, "", &t, i};
      if (auto* g = t.get("group")) {
        auto s = g->as_string();
        if (!s || std::find(groups.begin(), groups.end(), s->get()) == groups.end())
          d.error(*g, *n,
                  s ? fmt::format("no group \"{}\" in the description{}{}", s->get(),
                                  hint(s->get(), groups),
                                  groups.empty() ? "" : " (groups: " + joined(groups) + ")")
                    : std::string("\"group\" must be a group's name"));
        else
          ne.group = s->get();
      }
      if (auto* h = t.get("host"); h && (!h->is_integer() || h->as_integer()->get() < 1))
        d.error(*h, *n, "\"host\" must be a positive integer: the node's number on every rail");
      check_overrides(t, fmt::format("node \"{}\"", *n), {"name", "group", "host", "addresses"},
                      *n);
      ne.broken = d.list.size() > errors_before;
      nodes.push_back(ne);
    }
  }
  if (nodes.empty() && d.list.empty()) d.error(root, "", "the description has no [[node]] entries");
  if (only && std::none_of(nodes.begin(), nodes.end(), [&](auto& n) { return n.name == *only; })) {
    std::vector<std::string> names;
    for (auto& n : nodes) names.push_back(n.name);
    out.errors.push_back({file, 0, 0,
                          fmt::format("node {} is not in the description{} ({} nodes)", *only,
                                      hint(*only, names), nodes.size())});
    return out;
  }
  if (!cluster) {
    out.errors = std::move(d.list);
    return out;
  }

  // The addresses written out for each node, for the others' peer tables
  // (their errors are reported with the node's own rendering).
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::vector<IpAddr>>>>>
      written_all;
  for (auto& ne : nodes) {
    Diags quiet{file, {}, {}};
    auto w = explicit_addresses(quiet, *ne.table, ne.name, paths);
    std::vector<std::pair<std::string, std::vector<IpAddr>>> by_path;
    for (auto& path : paths) {  // in the description's path order
      std::vector<IpAddr> list;
      for (auto& [a, at] : w[path]) list.push_back(a);
      if (!list.empty()) by_path.push_back({path, list});
    }
    written_all.push_back({ne.name, by_path});
  }

  // Each node's policy, from a fresh parse of the description so that
  // every value moved into it keeps its file and line.
  Topology topology = Topology::Shared;
  if (auto* t = cluster->get_as<std::string>("topology"); t && t->get() == "separate")
    topology = Topology::Separate;
  for (auto& ne : nodes) {
    if ((only && ne.name != *only) || ne.broken) continue;
    size_t errors_before = d.list.size();
    toml::table doc;
    parse(doc);
    toml::table policy;
    auto& cl = *doc.get_as<toml::table>("cluster");
    toml::table node_sec;
    node_sec.insert("name", ne.name);
    for (std::string_view k : {"topology", "default_class"})
      if (auto* v = cl.get(k))
        v->visit([&](auto& x) { node_sec.insert_or_assign(k, std::move(x)); });
    node_sec.insert("cluster", out.cluster);
    if (!ne.group.empty()) node_sec.insert("group", ne.group);
    policy.insert("node", std::move(node_sec));
    for (auto sec : kSections)
      if (auto* t = doc.get_as<toml::table>(sec)) policy.insert(sec, std::move(*t));
    for (std::string_view key : {"path", "class"})
      if (auto* a = doc.get_as<toml::array>(key)) policy.insert(key, std::move(*a));
    auto& node_t = *doc.get_as<toml::array>("node")->get(ne.index)->as_table();
    if (!ne.group.empty())
      if (auto* groups_a = doc.get_as<toml::array>("group"))
        if (auto* g = entry_named(*groups_a, ne.group)) apply_overrides(policy, *g);
    // The group's settings, before anything of the node's own (a copy
    // without the node's name).
    toml::table group_settings = policy;
    group_settings["node"].as_table()->erase("name");
    std::string group_hash = content_hash(emit_policy(group_settings, ""));
    apply_overrides(policy, node_t);

    // Addresses: written out, or the path's network plus the host number.
    std::optional<int64_t> host;
    if (auto* h = node_t.get_as<int64_t>("host")) host = h->get();
    auto written = explicit_addresses(d, node_t, ne.name, paths);
    std::map<std::string, std::string> vars{{"node", ne.name},
                                            {"group", ne.group},
                                            {"cluster", out.cluster},
                                            {"host", host ? std::to_string(*host) : ""}};
    toml::array no_paths;
    auto* path_entries = policy.get_as<toml::array>("path");
    for (auto& e : path_entries ? *path_entries : no_paths) {
      auto& pt = *e.as_table();
      std::string path = *name_of(pt);
      auto [net4, net6] = networks[path];
      std::optional<IpAddr> src[2];
      for (auto& [a, at] : written[path]) src[a.family == AF_INET ? 0 : 1] = a;
      for (int i = 0; i < 2; ++i) {
        auto& net = i == 0 ? net4 : net6;
        if (!net) continue;
        if (!src[i] && host) {
          src[i] = host_address(*net, *host);
          if (!src[i])
            d.error(*node_t.get("host"), ne.name,
                    fmt::format("host {} does not fit path \"{}\"'s network {}", *host, path,
                                net->str()));
        } else if (src[i] && !net->contains(*src[i])) {
          for (auto& [a, at] : written[path])
            if (a == *src[i])
              d.error(
                  *at, ne.name,
                  fmt::format("{} is not in path \"{}\"'s network {}", a.str(), path, net->str()));
        }
      }
      if (src[0]) pt.insert_or_assign("source", src[0]->str());
      if (src[1]) pt.insert_or_assign("source6", src[1]->str());
      vars["source." + path] = src[0] ? src[0]->str() : "";
      vars["source6." + path] = src[1] ? src[1]->str() : "";
      if (!pt.get("routes") && (net4 || net6)) {
        toml::array routes;
        if (net4) routes.push_back(net4->str());
        if (net6) routes.push_back(net6->str());
        pt.insert("routes", std::move(routes));
      }
      for (auto k : kPathOnly) pt.erase(k);
    }
    // Nodes whose addresses are written out are in every other node's peer
    // table: connect-time placement finds them on another rail by it, not
    // by their host part (which need not agree between rails).
    if (topology == Topology::Separate) {
      toml::array peers;
      for (auto& [name, addrs] : written_all) {
        if (name == ne.name || addrs.empty()) continue;
        toml::table addresses;
        for (auto& [path, list] : addrs) {
          if (list.size() == 1) {
            addresses.insert(path, list.front().str());
          } else {
            toml::array both;
            for (auto& a : list) both.push_back(a.str());
            addresses.insert(path, std::move(both));
          }
        }
        toml::table entry;
        entry.insert("name", name);
        entry.insert("addresses", std::move(addresses));
        peers.push_back(std::move(entry));
      }
      if (!peers.empty()) policy.insert("peer", std::move(peers));
    }
    substitute_all(policy, vars, d, ne.name);
    policy["node"].as_table()->insert("group_hash", group_hash);
    if (d.list.size() > errors_before) continue;  // the policy checks would repeat them

    // The policy checks, as the node's dualpathd will run them; a value the
    // renderer made has no line, and is the node's.
    auto load = check_policy(policy, "", file);
    for (auto& e : load.errors) {
      if (e.line == 0) {
        e.line = static_cast<int>(node_t.source().begin.line);
        e.column = static_cast<int>(node_t.source().begin.column);
      }
      e.message = fmt::format("node {}: {}", ne.name, e.message);
      d.add(std::move(e), ne.name);
    }
    if (!d.list.empty()) continue;
    std::string header = fmt::format(
        "# dualpath policy of node {} (cluster \"{}\"{}),\n"
        "# rendered by dpctl policy render from {}.\n"
        "# Do not edit it: change the cluster description and render again\n"
        "# (dualpath-cluster(5)).\n",
        ne.name, out.cluster, ne.group.empty() ? "" : fmt::format(", group \"{}\"", ne.group),
        std::filesystem::path(file).filename().string());
    RenderedNode r{ne.name, ne.group, emit_policy(policy, header), "", group_hash};
    auto again = parse_policy(r.text, ne.name + ".toml");
    if (!again.ok()) {
      for (auto& e : again.errors)
        d.add(
            {file, static_cast<int>(node_t.source().begin.line), 0,
             fmt::format("node {}: the rendered policy does not read back: {}", ne.name, e.str())},
            ne.name);
      continue;
    }
    r.hash = again.policy->hash;
    out.nodes.push_back(std::move(r));
  }
  out.errors = merged(std::move(d.list), d.node);
  std::stable_sort(out.errors.begin(), out.errors.end(), [](auto& a, auto& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  if (!out.errors.empty()) out.nodes.clear();
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
