// SPDX-License-Identifier: Apache-2.0
// [[path]]: the rails. Their keys are read as declared (policy_schema_entries.cpp);
// here are the rules across a path's keys and across paths, and the check
// that no rail blackholes what another routes.
#include <arpa/inet.h>
#include "dualpath/abi.h"

#include "policy_checker.h"

namespace dp::policy_parts {

namespace {

// A path's fwmark: not the redirect bit, inside the policy's mark bits, and
// no other path's.
void path_fwmark(Checker& c, const toml::table& t, const std::string& section, const Policy& p,
                 std::set<uint32_t>& marks, const PathSpec& ps) {
  if (ps.fwmark & p.routing.redirect_mark)
    c.error(where(t, "fwmark"),
            fmt::format("fwmark {:#x} of {} uses bit {:#x}, which dualpath reserves for "
                        "redirected packets ([routing] redirect_mark)",
                        ps.fwmark, section, p.routing.redirect_mark));
  else if (ps.fwmark & ~p.routing.mark_mask)
    c.error(where(t, "fwmark"),
            fmt::format("fwmark {:#x} of {} has bits outside [routing] mark_mask {:#x}, which "
                        "belong to others",
                        ps.fwmark, section, p.routing.mark_mask));
  else if (!marks.insert(ps.fwmark).second)
    c.error(where(t, "fwmark"),
            fmt::format("fwmark {:#x} is used by more than one path", ps.fwmark));
}

// routes: prefixes; each family's routes need that family's gateway (a route
// without a next hop would be installed on-link).
void path_routes(Checker& c, const toml::table& t, const std::string& section, PathSpec& ps) {
  if (const toml::node* r = t.get("routes")) {
    auto* ra = r->as_array();
    if (!ra) {
      c.error(*r, fmt::format("routes of {} must be an array of prefixes", section));
    } else {
      for (auto& re : *ra) {
        auto s = re.as_string();
        auto pf = s ? Prefix::parse(s->get()) : std::nullopt;
        if (!pf) {
          c.error(re, fmt::format("route \"{}\" of {} is not a prefix like \"10.0.0.0/8\", "
                                  "\"fd00::/64\" or \"default\"",
                                  s ? s->get() : "?", section));
          continue;
        }
        ps.routes.push_back(*pf);
      }
    }
  }
  if (!t.get("gateway") && !t.get("gateway6")) {
    c.error(t, fmt::format("{} has neither gateway nor gateway6: traffic steered onto it needs "
                           "a next hop",
                           section));
    return;
  }
  const toml::node* r = t.get("routes");
  if (!r || !r->is_array()) return;
  for (size_t i = 0; i < ps.routes.size() && i < r->as_array()->size(); ++i) {
    int fam = ps.routes[i].addr.family;
    bool has_gw = fam == AF_INET ? ps.gateway.has_value() : ps.gateway6.has_value();
    if (has_gw) continue;
    c.error(*r->as_array()->get(i),
            fmt::format("route {} of {} is {}, but the path has no {}: the route would be "
                        "installed on-link, without a next hop (set {}, and {} for this "
                        "node's address on the rail)",
                        ps.routes[i].str(), section, fam == AF_INET ? "IPv4" : "IPv6",
                        fam == AF_INET ? "gateway" : "gateway6",
                        fam == AF_INET ? "gateway" : "gateway6",
                        fam == AF_INET ? "source" : "source6"));
    break;  // once per path and family is enough
  }
}

}  // namespace

const toml::array* entries(Checker& c, const toml::table& root, std::string_view name,
                           const std::string& missing, size_t max, std::string_view plural) {
  const toml::node* n = root.get(name);
  if (!n) {
    if (!missing.empty() && !c.refused_like(name)) c.error(root.source(), missing);
    return nullptr;
  }
  auto* arr = n->as_array();
  if (!arr || !arr->is_array_of_tables()) {
    c.error(*n, fmt::format("\"{}\" must be written as [[{}]] sections", name, name));
    return nullptr;
  }
  if (arr->size() > max)
    c.error(*n, fmt::format("{} {} are given; at most {} are supported", arr->size(), plural, max));
  return arr;
}

void parse_paths(Checker& c, const toml::table& root, Policy& p) {
  auto* arr = entries(c, root, "path",
                      "the policy has no [[path]] sections: a node needs at least one rail",
                      DP_MAX_RAILS, "paths");
  if (!arr) return;
  const auto& decl = schema::section("path");
  std::set<std::string> names, ifaces;
  std::set<uint32_t> tables, marks;
  for (auto& e : *arr) {
    auto& t = *e.as_table();
    PathSpec ps;
    schema::Target target{p, &ps};
    std::string section = "[[path]]";
    c.only_keys(t, decl.key_names(), section);
    if (auto v = c.string(t, "name", section, true)) {
      ps.name = *v;
      section = fmt::format("path \"{}\"", *v);
      if (auto bad = name_problem("path", *v); !bad.empty())
        c.error(where(t, "name"), bad);
      else if (!names.insert(*v).second)
        c.error(where(t, "name"), fmt::format("duplicate path name \"{}\"", *v));
    }
    c.read_keys(t, decl, section, target, {"name"});
    if (!ps.interface.empty() && !ifaces.insert(ps.interface).second)
      c.error(where(t, "interface"),
              fmt::format("interface \"{}\" is used by more than one path", ps.interface));
    if (ps.table && !tables.insert(ps.table).second)
      c.error(where(t, "table"),
              fmt::format("routing table {} is used by more than one path", ps.table));
    if (ps.fwmark) path_fwmark(c, t, section, p, marks, ps);
    path_routes(c, t, section, ps);
    p.paths.push_back(std::move(ps));
  }
}

// What would blackhole is refused: in the shared topology a flow may be
// redirected to any rail, so every rail must route what the others route; in
// the separate topology each rail's routes are its own networks, which must
// not overlap (an address would belong to two rails).
void check_topology(Checker& c, const toml::table& root, const Policy& p) {
  auto* pa = root.get_as<toml::array>("path");
  auto routes_node = [&](size_t i) -> const toml::node& {
    const toml::node* n = pa && i < pa->size() ? pa->get(i) : nullptr;
    const toml::table* t = n ? n->as_table() : nullptr;
    return t ? where(*t, "routes") : static_cast<const toml::node&>(root);
  };
  auto contains = [](const Prefix& net, const Prefix& x) {
    if (net.addr.family != x.addr.family || x.len < net.len) return false;
    for (int b = 0; b < net.len; ++b) {
      auto bit = [&](const IpAddr& a) { return (a.bytes[size_t(b / 8)] >> (7 - b % 8)) & 1; };
      if (bit(net.addr) != bit(x.addr)) return false;
    }
    return true;
  };
  if (p.topology == Topology::Shared) {
    bool any =
        std::any_of(p.paths.begin(), p.paths.end(), [](auto& ps) { return !ps.routes.empty(); });
    for (size_t i = 0; i < p.paths.size() && any; ++i)
      if (p.paths[i].routes.empty())
        c.error(routes_node(i),
                fmt::format("path {} has no routes: in the shared topology every rail must route "
                            "what the others route (a flow may be redirected onto any rail), so "
                            "give it the same routes as the others",
                            p.paths[i].name));
    for (size_t i = 0; i < p.paths.size(); ++i)
      for (size_t j = 0; j < p.paths.size(); ++j) {
        if (i == j || p.paths[i].routes.empty() || p.paths[j].routes.empty()) continue;
        for (const auto& r : p.paths[j].routes) {
          bool reached = std::any_of(p.paths[i].routes.begin(), p.paths[i].routes.end(),
                                     [&](const Prefix& mine) { return contains(mine, r); });
          if (!reached) {
            c.error(routes_node(i),
                    fmt::format("path {} does not route {}, which path {} routes: in the shared "
                                "topology a flow may be redirected onto any rail, and {} would "
                                "blackhole it; route it on {} too, or set [node] topology = "
                                "\"separate\" if each rail is its own network",
                                p.paths[i].name, r.str(), p.paths[j].name, p.paths[i].name,
                                p.paths[i].name));
            break;
          }
        }
      }
    return;
  }
  for (size_t i = 0; i < p.paths.size(); ++i) {
    const auto& ps = p.paths[i];
    if (ps.routes.empty()) {
      c.error(routes_node(i),
              fmt::format("path {} has no routes: in the separate topology a path's routes are "
                          "its rail's networks (where the peers' addresses on that rail are)",
                          ps.name));
      continue;
    }
    for (const auto& r : ps.routes)
      if (r.len == 0)
        c.error(routes_node(i),
                fmt::format("path {} routes {}: in the separate topology a rail's networks "
                            "cannot be a default route",
                            ps.name, r.str()));
    for (size_t j = 0; j < i; ++j)
      for (const auto& a : p.paths[j].routes)
        for (const auto& b : ps.routes)
          if (a.len && b.len && (contains(a, b) || contains(b, a)))
            c.error(routes_node(i),
                    fmt::format("{} of path {} overlaps {} of path {}: in the separate topology "
                                "an address belongs to one rail's network",
                                b.str(), ps.name, a.str(), p.paths[j].name));
  }
}

}  // namespace dp::policy_parts
