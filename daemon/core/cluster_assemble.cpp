// SPDX-License-Identifier: Apache-2.0
// Rendering a cluster description, stages 6 and 7 (cluster_stages.h): each
// node's policy assembled from the one parse, checked and written out, and
// the errors grouped.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "dualpath/core/cluster_stages.h"
#include "dualpath/core/policy_toml.h"

namespace dp::cluster {

namespace {

// Keys of a description's [[path]] that are not the policy's: the rail's
// networks, where a node's address is found by its host number.
constexpr std::string_view kPathOnly[] = {"network", "network6"};

// t[key] = n, moved (toml++ keeps a node's source region only when it is
// moved, not copied).
void put(toml::table& t, const std::string& key, toml::node& n) {
  n.visit([&](auto& x) { t.insert_or_assign(key, std::move(x)); });
}

void emit_keys(std::ostringstream& out, const toml::table& t) {
  if (auto* n = t.get("name")) out << "name = " << render_toml_value(*n) << "\n";
  for (auto& [k, v] : t)
    if (k.str() != "name") out << k.str() << " = " << render_toml_value(v) << "\n";
}

void substitute_in(toml::node& n, Journal& j, const Vars& vars, Diags& d, const std::string& node) {
  if (auto* t = n.as_table()) {
    for (auto& [k, v] : *t) substitute_in(v, j, vars, d, node);
  } else if (auto* a = n.as_array()) {
    for (auto& e : *a) substitute_in(e, j, vars, d, node);
  } else if (auto* s = n.as_string()) {
    if (s->get().find_first_of("{}") == std::string::npos) return;
    std::string problem;
    if (auto v = substitute(s->get(), vars, problem))
      j.set_string(*s, std::move(*v));
    else
      d.error(n, node, fmt::format("\"{}\": {}", s->get(), problem));
  }
}

}  // namespace

std::optional<size_t> Journal::hold(toml::table& t, const std::string& key) {
  auto* n = t.get(key);
  if (!n) return std::nullopt;
  n->visit([&](auto& x) { held_.push_back(std::move(x)); });
  return held_.size() - 1;
}

void Journal::move(toml::table& into, const std::string& key, toml::table& from) {
  auto* n = from.get(key);
  if (!n) return;
  log_.push_back({Kind::Move, &into, &from, key, 0, hold(into, key)});
  put(into, key, *n);
}

void Journal::set(toml::table& into, const std::string& key, toml::node&& v) {
  log_.push_back({Kind::Set, &into, nullptr, key, 0, hold(into, key)});
  put(into, key, v);
}

void Journal::erase(toml::table& t, const std::string& key) {
  if (!t.get(key)) return;
  log_.push_back({Kind::Erase, &t, nullptr, key, 0, hold(t, key)});
  t.erase(key);
}

void Journal::append(toml::array& into, toml::array& from, size_t i) {
  from.get(i)->visit([&](auto& x) { into.push_back(std::move(x)); });
  log_.push_back({Kind::Append, &into, &from, "", i, std::nullopt});
}

void Journal::set_string(toml::value<std::string>& s, std::string v) {
  log_.push_back({Kind::String, &s, nullptr, std::move(s.get()), 0, std::nullopt});
  s.get() = std::move(v);
}

void Journal::restore() {
  for (auto e = log_.rbegin(); e != log_.rend(); ++e) {
    auto* into = e->into->as_table();
    switch (e->kind) {
      case Kind::Move:
        put(*e->from->as_table(), e->key, *into->get(e->key));
        [[fallthrough]];
      case Kind::Set:
      case Kind::Erase:
        if (e->held)
          put(*into, e->key, *held_.get(*e->held));
        else
          into->erase(e->key);
        break;
      case Kind::Append: {
        auto& arr = *e->into->as_array();
        auto& from = *e->from->as_array();
        arr.back().visit([&](auto& x) { from.replace(from.cbegin() + e->index, std::move(x)); });
        arr.pop_back();
        break;
      }
      case Kind::String:
        e->into->as_string()->get() = std::move(e->key);
        break;
    }
  }
  log_.clear();
  held_.clear();
}

void assemble_shared(Assembly& a, toml::table& root, const Shape& shape, const NodeEntry& n) {
  auto& j = a.journal;
  a.policy.insert("node", toml::table{});
  auto& node_sec = *a.policy.get_as<toml::table>("node");
  node_sec.insert("name", n.name);
  auto& cluster = *root.get_as<toml::table>("cluster");
  for (std::string k : {"topology", "default_class"}) j.move(node_sec, k, cluster);
  node_sec.insert("cluster", shape.cluster);
  if (!n.group.empty()) node_sec.insert("group", n.group);
  for (auto sec : policy_sections())
    if (root.get_as<toml::table>(sec)) j.move(a.policy, std::string(sec), root);
  for (std::string key : {"path", "class"})
    if (root.get_as<toml::array>(key)) j.move(a.policy, key, root);
  if (n.group.empty()) return;
  if (auto* groups = root.get_as<toml::array>("group"))
    if (auto* g = entry_named(*groups, n.group)) apply_overrides(a, *g);
}

void apply_overrides(Assembly& a, toml::table& over) {
  auto& j = a.journal;
  auto& policy = a.policy;
  j.move(*policy.get_as<toml::table>("node"), "default_class", over);
  for (auto sec : policy_sections()) {
    auto* from = over.get_as<toml::table>(sec);
    if (!from) continue;
    std::string key(sec);
    if (!policy.get_as<toml::table>(key)) j.set(policy, key, toml::table{});
    auto& into = *policy.get_as<toml::table>(key);
    for (auto& [k, v] : *from) j.move(into, std::string(k.str()), *from);
  }
  for (std::string key : {"path", "class"}) {
    auto* from = over.get_as<toml::array>(key);
    if (!from) continue;
    if (!policy.get_as<toml::array>(key)) j.set(policy, key, toml::array{});
    auto& into = *policy.get_as<toml::array>(key);
    for (size_t i = 0; i < from->size(); ++i) {
      auto* t = from->get(i)->as_table();
      if (!t) continue;
      auto name = name_of(*t);
      if (auto* have = name ? entry_named(into, *name) : nullptr)
        for (auto& [k, v] : *t) j.move(*have, std::string(k.str()), *t);
      else
        j.append(into, *from, i);  // a new class (paths were checked to exist)
    }
  }
}

void write_addresses(Assembly& a, const std::vector<NodeAddress>& addrs, const Shape& shape) {
  auto* paths = a.policy.get_as<toml::array>("path");
  if (!paths) return;
  for (auto& e : *paths) {
    auto* t = e.as_table();
    auto name = t ? name_of(*t) : std::nullopt;
    auto* rail = name ? shape.path(*name) : nullptr;
    if (!rail) continue;  // the description's shape errors name it
    auto& pt = *t;
    for (auto& x : addrs) {
      if (x.path != rail->name) continue;
      if (x.v4) a.journal.set(pt, "source", toml::value<std::string>(x.v4->str()));
      if (x.v6) a.journal.set(pt, "source6", toml::value<std::string>(x.v6->str()));
    }
    if (!pt.get("routes") && (rail->net4 || rail->net6)) {
      toml::array routes;
      if (rail->net4) routes.push_back(rail->net4->str());
      if (rail->net6) routes.push_back(rail->net6->str());
      a.journal.set(pt, "routes", std::move(routes));
    }
    for (auto k : kPathOnly) a.journal.erase(pt, std::string(k));
  }
}

void substitute_all(Assembly& a, const Vars& vars, Diags& d, const std::string& node) {
  substitute_in(a.policy, a.journal, vars, d, node);
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
  for (auto s : policy_sections()) section(s);
  for (std::string_view key : {"path", "class", "peer"})
    if (auto* a = p.get_as<toml::array>(key))
      for (auto& e : *a)
        if (auto* t = e.as_table()) {  // else the policy's checks refuse it
          out << "\n[[" << key << "]]\n";
          emit_keys(out, *t);
        }
  return out.str();
}

void check_node_policy(Diags& d, const toml::table& policy, const NodeEntry& n) {
  auto load = check_policy(policy, "", d.file);
  for (auto& e : load.errors) {
    if (e.line == 0) {
      e.line = static_cast<int>(n.table->source().begin.line);
      e.column = static_cast<int>(n.table->source().begin.column);
    }
    e.message = fmt::format("node {}: {}", n.name, e.message);
    d.add(std::move(e), n.name);
  }
}

std::vector<PeerText> peer_texts(const toml::array& entries) {
  std::vector<PeerText> out;
  for (auto& e : entries) {
    auto& t = *e.as_table();
    std::ostringstream text;
    text << "\n[[peer]]\n";
    emit_keys(text, t);
    out.push_back({name_of(t).value_or(""), text.str()});
  }
  return out;
}

std::string peer_tail(const std::vector<PeerText>& peers, const std::string& self) {
  size_t size = 0;
  for (auto& p : peers) size += p.text.size();
  std::string out;
  out.reserve(size);
  for (auto& p : peers)
    if (p.name != self) out += p.text;
  return out;
}

std::optional<RenderedNode> write_node(Diags& d, const toml::table& policy, const NodeEntry& n,
                                       const NodeText& with) {
  std::string header = fmt::format(
      "# dualpath policy of node {} ({}cluster \"{}\"{}),\n"
      "# rendered by dpctl policy render from {}.\n"
      "# Do not edit it: change the cluster description and render again\n"
      "# (dualpath-cluster(5)).\n",
      n.name, n.hostname.empty() ? "" : fmt::format("hostname {}, ", n.hostname), with.cluster,
      n.group.empty() ? "" : fmt::format(", group \"{}\"", n.group),
      std::filesystem::path(d.file).filename().string());
  RenderedNode r{n.name, n.group, emit_policy(policy, header), "", with.group_hash, n.hostname};
  auto again = parse_policy(with.read_back_peers ? r.text + with.peers : r.text, n.name + ".toml");
  if (!again.ok()) {
    for (auto& e : again.errors)
      d.add({d.file, static_cast<int>(n.table->source().begin.line), 0,
             fmt::format("node {}: the rendered policy does not read back: {}", n.name, e.str())},
            n.name);
    return std::nullopt;
  }
  r.text += with.peers;
  r.hash = content_hash(r.text);
  return r;
}

std::vector<Diagnostic> group_errors(std::vector<Diagnostic> list,
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
  std::stable_sort(out.begin(), out.end(), [](auto& a, auto& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  return out;
}

}  // namespace dp::cluster
