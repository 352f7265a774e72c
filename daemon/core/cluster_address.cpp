// SPDX-License-Identifier: Apache-2.0
// Rendering a cluster description, stages 3 to 5 (cluster_stages.h): each
// node's addresses, the peer table, and placeholders.
#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>
#include <set>

#include "dualpath/core/cluster_stages.h"
#include "dualpath/core/policy_toml.h"

namespace dp::cluster {

std::optional<IpAddr> host_address(const Prefix& net, int64_t host) {
  bool v4 = net.addr.family == AF_INET;
  int bits = (v4 ? 32 : 128) - net.len;
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

uint64_t host_part(const Prefix& net, const IpAddr& a) {
  size_t size = a.family == AF_INET ? 4 : 16;
  int bits = std::min(static_cast<int>(size) * 8 - net.len, 64);
  uint64_t v = 0;
  for (size_t i = size > 8 ? size - 8 : 0; i < size; ++i) v = v << 8 | a.bytes[i];
  return bits >= 64 ? v : v & ((uint64_t{1} << bits) - 1);
}

namespace {

// One path's entry of `addresses`: an address, or a list of one of each
// family.
void written_on_path(Diags& d, const toml::node& v, const std::string& node,
                     const std::string& path, std::vector<Written>& out) {
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
      d.error(*e, node,
              fmt::format("addresses.{} must be an IP address or a list of them (one IPv4, one "
                          "IPv6), not {}",
                          path, render_toml_value(*e)));
      continue;
    }
    if (!families.insert(a->family).second) {
      d.error(*e, node,
              fmt::format("addresses.{} has two {} addresses; a rail has one of each", path,
                          a->family == AF_INET ? "IPv4" : "IPv6"));
      continue;
    }
    out.push_back({*a, e});
  }
}

}  // namespace

WrittenAddresses written_addresses(Diags& d, const NodeEntry& n, const Shape& shape) {
  WrittenAddresses out;
  const toml::node* at = n.table->get("addresses");
  if (!at) return out;
  auto* t = at->as_table();
  if (!t) {
    d.error(*at, n.name,
            "\"addresses\" must be a table of path names, such as { roce = \"192.168.10.17\" }");
    return out;
  }
  for (auto& [k, v] : *t) {
    std::string path(k.str());
    if (!shape.path(path)) {
      auto paths = shape.path_names();
      d.error(v, n.name,
              fmt::format("addresses: no path \"{}\" in the description{} (paths: {})", path,
                          hint(path, paths), joined(paths)));
      continue;
    }
    written_on_path(d, v, n.name, path, out[path]);
  }
  return out;
}

std::vector<NodeAddress> address_node(Diags& d, const NodeEntry& n, const WrittenAddresses& w,
                                      const Shape& shape) {
  std::vector<NodeAddress> out;
  static const std::vector<Written> none;
  for (auto& rail : shape.paths) {
    auto it = w.find(rail.name);
    auto& written = it == w.end() ? none : it->second;
    std::optional<IpAddr> src[2];
    for (auto& x : written) src[x.addr.family == AF_INET ? 0 : 1] = x.addr;
    for (int i = 0; i < 2; ++i) {
      auto& net = i == 0 ? rail.net4 : rail.net6;
      if (!net) continue;
      if (!src[i] && n.host) {
        src[i] = host_address(*net, *n.host);
        if (!src[i])
          d.error(*n.table->get("host"), n.name,
                  fmt::format("host {} does not fit path \"{}\"'s network {}", *n.host, rail.name,
                              net->str()));
      } else if (src[i] && !net->contains(*src[i])) {
        for (auto& x : written)
          if (x.addr == *src[i])
            d.error(*x.at, n.name,
                    fmt::format("{} is not in path \"{}\"'s network {}", x.addr.str(), rail.name,
                                net->str()));
      }
    }
    out.push_back({rail.name, src[0], src[1]});
  }
  return out;
}

std::vector<Peer> peer_table(const std::vector<NodeEntry>& nodes,
                             const std::vector<WrittenAddresses>& written, const Shape& shape) {
  std::vector<Peer> out;
  for (size_t i = 0; i < nodes.size() && i < written.size(); ++i) {
    if (nodes[i].name.empty()) continue;
    Peer p{nodes[i].name, {}};
    for (auto& rail : shape.paths) {  // in the description's path order
      auto it = written[i].find(rail.name);
      if (it == written[i].end() || it->second.empty()) continue;
      std::vector<std::string> list;
      for (auto& x : it->second) list.push_back(x.addr.str());
      p.by_path.push_back({rail.name, std::move(list)});
    }
    if (!p.by_path.empty()) out.push_back(std::move(p));
  }
  return out;
}

toml::array peer_entries(const std::vector<Peer>& peers, const std::string& self) {
  toml::array out;
  for (auto& p : peers) {
    if (p.name == self) continue;
    toml::table addresses;
    for (auto& [path, list] : p.by_path) {
      if (list.size() == 1) {
        addresses.insert(path, list.front());
      } else {
        toml::array both;
        for (auto& a : list) both.push_back(a);
        addresses.insert(path, std::move(both));
      }
    }
    toml::table entry;
    entry.insert("name", p.name);
    entry.insert("addresses", std::move(addresses));
    out.push_back(std::move(entry));
  }
  return out;
}

Vars node_vars(const NodeEntry& n, const std::string& cluster,
               const std::vector<NodeAddress>& addrs) {
  Vars vars{{"node", n.name},
            {"group", n.group},
            {"cluster", cluster},
            {"host", n.host ? std::to_string(*n.host) : ""}};
  for (auto& a : addrs) {
    vars["source." + a.path] = a.v4 ? a.v4->str() : "";
    vars["source6." + a.path] = a.v6 ? a.v6->str() : "";
  }
  return vars;
}

std::optional<std::string> substitute(const std::string& s, const Vars& vars,
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

}  // namespace dp::cluster
