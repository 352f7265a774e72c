// SPDX-License-Identifier: Apache-2.0
// The sections written once: [node], [routing], [scheduler], [health],
// [measurement], [metrics], [responder], [nccl], and the [[peer]] table.
// Their keys are read as declared (policy_schema.cpp); what is here is each
// section's rules over several keys, and the values of a form of their own.
#include <algorithm>
#include <charconv>
#include <optional>

#include <arpa/inet.h>
#include "dualpath/core/units.h"

#include "policy_checker.h"

namespace dp::policy_parts {

namespace {

// flowcell: a size ("256KiB") or bytes, 0 (off) or a power of two from 4KiB
// to 16MiB.
void scheduler_flowcell(Checker& c, const toml::table& t, SchedulerSettings& k) {
  const toml::node* n = t.get("flowcell");
  if (!n) return;
  std::optional<uint64_t> bytes;
  std::string why = "must be a size such as \"256KiB\", or 0";
  if (auto i = n->as_integer()) {
    if (i->get() >= 0) bytes = static_cast<uint64_t>(i->get());
  } else if (auto str = n->as_string()) {
    if (auto v = parse_size(str->get()))
      bytes = *v;
    else
      why = v.error().message;
  }
  if (!bytes)
    c.error(*n, fmt::format("\"flowcell\" in [scheduler] {}", why));
  else if (*bytes != 0 && (*bytes < 4096 || *bytes > (16u << 20) || (*bytes & (*bytes - 1)) != 0))
    c.error(*n, fmt::format("flowcell {} in [scheduler] must be 0 (off) or a power of two from "
                            "4KiB to 16MiB",
                            *bytes));
  else
    k.flowcell = *bytes;
}

// placement and flowcell agree: bursts take no cells, flowlets no cell size,
// cells a default size; a burst ends at a longer gap than a flowlet (a TCP
// flow paced by a 250 Mbit rail pauses for a 64 KiB segment's 2 ms within
// one, so the flowlets' 500 us would cut bursts short). A flowcell alone
// means cells.
void scheduler_placement(Checker& c, const toml::table& t, SchedulerSettings& k) {
  const toml::node* n = t.get("placement");
  const bool gap_given = t.get("flowlet_gap") != nullptr;
  if (!n) {
    if (k.flowcell != 0) {
      k.burst_placement = false;
      if (!gap_given) k.flowlet_gap = kDefaultFlowletGap;
    }
    return;
  }
  auto word = n->value<std::string>();
  const auto& words =
      std::get<schema::Word>(schema::section("scheduler").key("placement")->type).words;
  if (!word || std::find(words.begin(), words.end(), *word) == words.end())
    return;  // refused as declared
  if (!gap_given) k.flowlet_gap = k.burst_placement ? kDefaultBurstGap : kDefaultFlowletGap;
  if (*word == "bursts") {
    if (k.flowcell != 0)
      c.error(*n,
              "placement = \"bursts\" in [scheduler] places whole bursts: remove flowcell (the "
              "cell size of placement = \"cells\")");
  } else if (*word == "cells") {
    if (k.flowcell == 0) k.flowcell = kDefaultFlowcell;
  } else if (k.flowcell != 0) {
    c.error(*n,
            "placement = \"flowlets\" in [scheduler] does not use flowcell: remove it, or say "
            "placement = \"cells\"");
  }
}

// ramp: increasing percentages ending at 100.
void health_ramp(Checker& c, const toml::table& t, HealthSettings& h) {
  const toml::node* n = t.get("ramp");
  if (!n) return;
  auto* arr = n->as_array();
  std::vector<int> ramp;
  bool good = arr && !arr->empty();
  for (size_t i = 0; good && i < arr->size(); ++i) {
    auto v = arr->get(i)->as_integer();
    if (!v || v->get() < 1 || v->get() > 100 || (!ramp.empty() && v->get() <= ramp.back()))
      good = false;
    else
      ramp.push_back(static_cast<int>(v->get()));
  }
  if (!good || ramp.back() != 100)
    c.error(*n,
            "ramp in [health] must be increasing percentages ending at 100, e.g. "
            "[10, 25, 50, 100]");
  else
    h.ramp = ramp;
}

// bfd_auth needs a key file, and a key file needs bfd_auth: a key given
// and not used would run BFD unauthenticated unnoticed.
void health_auth(Checker& c, const toml::table& t, const HealthSettings& h) {
  const std::string& file = h.bfd_auth_key_file;
  if (h.bfd_auth != 0 && file.empty() && t.get("bfd_auth"))
    c.error(*t.get("bfd_auth"),
            "bfd_auth in [health] needs bfd_auth_key_file, the file that holds the key shared "
            "with each rail's BFD peer (1 to 20 bytes, readable by root only)");
  if (!t.get("bfd_auth_key_file")) return;
  const toml::node& at = *t.get("bfd_auth_key_file");
  if (h.bfd_auth == 0 && !file.empty())
    c.error(at,
            "bfd_auth_key_file in [health] is used only with bfd_auth: say bfd_auth = "
            "\"meticulous-keyed-sha1\" (or \"keyed-sha1\"), or remove the key file");
  else if (!file.empty() && file.front() != '/')
    c.error(at,
            "bfd_auth_key_file in [health] must be an absolute path, e.g. "
            "\"/etc/dualpath/bfd.key\"");
}

// allow: the prefixes whose probes the responder answers.
void responder_allow(Checker& c, const toml::table& t, ResponderSettings& r) {
  const toml::node* n = t.get("allow");
  if (!n) return;
  auto* arr = n->as_array();
  if (!arr) c.error(*n, "allow in [responder] must be an array of prefixes");
  for (size_t i = 0; arr && i < arr->size(); ++i) {
    auto* e = arr->get(i);
    auto* str = e->as_string();
    auto pf = str ? Prefix::parse(str->get()) : std::nullopt;
    if (!pf)
      c.error(*e, "allow in [responder] takes prefixes such as \"10.0.0.0/8\" or \"fd00::/8\"");
    else
      r.allow.push_back(*pf);
  }
}

}  // namespace

const toml::table* read_section(Checker& c, const toml::table& root, std::string_view name,
                                Policy& p) {
  const toml::node* n = root.get(name);
  if (!n) return nullptr;
  const auto& s = schema::section(name);
  auto* t = n->as_table();
  if (!t) {
    c.error(*n, fmt::format("{} must be a {} section", name, s.title()));
    return nullptr;
  }
  c.only_keys(*t, s.key_names(), s.title());
  schema::Target target{p};
  c.read_keys(*t, s, s.title(), target);
  return t;
}

void parse_node(Checker& c, const toml::table& root, Policy& p) {
  if (!root.get("node")) {
    if (!c.refused_like("node"))
      c.error(root.source(), "the policy has no [node] section (it needs at least name = \"...\")");
    return;
  }
  read_section(c, root, "node", p);
}

void parse_routing(Checker& c, const toml::table& root, Policy& p) {
  auto* t = read_section(c, root, "routing", p);
  if (!t) return;
  if (!(p.routing.redirect_mark & p.routing.mark_mask))
    c.error(where(*t, t->get("redirect_mark") ? "redirect_mark" : "mark_mask"),
            fmt::format("redirect_mark {:#x} in [routing] is outside mark_mask {:#x}: dualpath "
                        "may only use bits of its mask",
                        p.routing.redirect_mark, p.routing.mark_mask));
}

void parse_scheduler(Checker& c, const toml::table& root, Policy& p) {
  auto* t = read_section(c, root, "scheduler", p);
  if (!t) return;
  auto& k = p.scheduler;
  scheduler_flowcell(c, *t, k);
  scheduler_placement(c, *t, k);
  if (t->get("return_margin") && k.return_margin >= k.load_threshold)
    c.error(where(*t, "return_margin"),
            fmt::format("return_margin {} is not below load_threshold {}: a spilled class could "
                        "never return to its preferred rail",
                        k.return_margin, k.load_threshold));
  if (k.dead_zone > k.latency_tolerance)
    c.error(where(*t, "dead_zone"),
            fmt::format("dead_zone {} is larger than latency_tolerance {}: no move could ever "
                        "happen",
                        format_duration(k.dead_zone), format_duration(k.latency_tolerance)));
}

void parse_health(Checker& c, const toml::table& root, Policy& p) {
  auto* t = read_section(c, root, "health", p);
  if (!t) return;
  health_ramp(c, *t, p.health);
  health_auth(c, *t, p.health);
}

void parse_measurement(Checker& c, const toml::table& root, Policy& p) {
  read_section(c, root, "measurement", p);
  read_section(c, root, "metrics", p);
  read_section(c, root, "events", p);
}

void parse_responder(Checker& c, const toml::table& root, Policy& p) {
  if (auto* t = read_section(c, root, "responder", p)) responder_allow(c, *t, p.responder);
}

// The responder's ports (one per rail, and one more per rail for MPTCP while
// a class is multipath) must be free of class ports: a probe must not be
// classified, or it would be steered off the rail it measures.
void check_responder(Checker& c, const toml::table& root, const Policy& p) {
  auto* t = root.get_as<toml::table>("responder");
  if (!p.responder.enable || p.paths.empty()) return;
  size_t first = p.responder.port, last = first + responder_ports(p) - 1;
  const toml::node& at = t && t->get("port") ? *t->get("port") : root;
  if (last > 65535) {
    c.error(at, fmt::format(
                    "port {} in [responder]: the responder takes one port per rail{}, {} "
                    "to {}, beyond 65535",
                    first, responder_ports(p) > p.paths.size() ? " and one per rail for MPTCP" : "",
                    first, last));
    return;
  }
  for (const auto& k : p.classes)
    for (const auto& r : k.ports)
      if (r.proto == Proto::Tcp && r.lo <= last && r.hi >= first)
        c.error(at, fmt::format("the responder's ports {}-{} (from [responder] port) overlap "
                                "{} of class \"{}\"; move one, or set enable = false in "
                                "[responder]",
                                first, last, r.str(), k.name));
}

// [nccl]: traffic_class.N = "CLASS" and operation.OP = "CLASS", each naming
// a class of this policy (after parse_classes).
void parse_nccl(Checker& c, const toml::table& root, Policy& p) {
  auto* t = read_section(c, root, "nccl", p);
  if (!t) return;
  std::string classes;
  for (const auto& k : p.classes) classes += (classes.empty() ? "" : ", ") + k.name;
  // the class a key maps to, or an error at the value
  auto klass = [&](const toml::node& v, const std::string& key) -> std::optional<std::string> {
    auto s = v.value<std::string>();
    if (!s) {
      c.error(v, fmt::format("[nccl] {} must be a class name in quotes", key));
      return std::nullopt;
    }
    if (!p.klass(*s)) {
      c.error(v, fmt::format("[nccl] {} = \"{}\" is not a class of this policy (classes: {})", key,
                             *s, classes));
      return std::nullopt;
    }
    return s;
  };
  if (const toml::node* tc = t->get("traffic_class")) {
    auto* tt = tc->as_table();
    if (!tt) {
      c.error(*tc, "[nccl] traffic_class must be written traffic_class.N = \"CLASS\"");
    } else {
      for (auto& [k, v] : *tt) {
        const std::string key = std::string(k.str());
        int num = -1;
        auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), num);
        if (ec != std::errc() || end != key.data() + key.size() || num < 0 || num > 255) {
          c.error(k.source().begin.line ? k.source() : v.source(),
                  fmt::format("[nccl] traffic_class.{}: the key must be an NCCL traffic class, a "
                              "whole number from 0 to 255 (the communicator's trafficClass)",
                              key));
          continue;
        }
        if (auto s = klass(v, "traffic_class." + key)) p.nccl.traffic_class[num] = *s;
      }
    }
  }
  if (const toml::node* op = t->get("operation")) {
    auto* ot = op->as_table();
    if (!ot) {
      c.error(*op, "[nccl] operation must be written operation.OP = \"CLASS\"");
      return;
    }
    std::string ops;
    std::vector<std::string> names;
    for (auto o : kNcclOperations) {
      ops += (ops.empty() ? "" : ", ") + std::string(o);
      names.emplace_back(o);
    }
    for (auto& [k, v] : *ot) {
      const std::string key = std::string(k.str());
      if (std::find(std::begin(kNcclOperations), std::end(kNcclOperations), key) ==
          std::end(kNcclOperations)) {
        auto near = nearest_name(key, names);
        c.error(k.source().begin.line ? k.source() : v.source(),
                fmt::format("[nccl] operation.{} is not an NCCL operation{} (one of: {})", key,
                            near ? fmt::format("; did you mean \"{}\"?", *near) : "", ops));
        continue;
      }
      if (auto s = klass(v, "operation." + key)) p.nccl.operation[key] = *s;
    }
  }
}

namespace {

// A peer's addresses on one path (`item`: an address, or a list of one IPv4
// and one IPv6): each into its slot; how many were taken. An address may be
// one peer's only (`seen`: address -> the peer that has it).
size_t peer_addresses(Checker& c, const std::string& section, std::string_view path, size_t idx,
                      const toml::node& item, std::map<std::string, std::string>& seen,
                      PeerSpec& pe) {
  std::vector<const toml::node*> items;
  if (auto* a = item.as_array())
    for (auto& x : *a) items.push_back(&x);
  else
    items.push_back(&item);
  size_t given = 0;
  for (auto* x : items) {
    auto* str = x->as_string();
    auto a = str ? IpAddr::parse(str->get()) : std::nullopt;
    if (!a) {
      c.error(*x, fmt::format("{}: addresses.{} must be an IP address or a list of one IPv4 "
                              "and one IPv6 address",
                              section, path));
      continue;
    }
    auto& slot = (a->family == AF_INET ? pe.addr4 : pe.addr6)[idx];
    if (slot) {
      c.error(*x, fmt::format("{}: addresses.{} has two {} addresses", section, path,
                              a->family == AF_INET ? "IPv4" : "IPv6"));
      continue;
    }
    auto [it, fresh] = seen.try_emplace(a->str(), section);
    if (!fresh) {
      c.error(*x, fmt::format("{}: {} is also {}'s address", section, a->str(), it->second));
      continue;
    }
    slot = *a;
    ++given;
  }
  return given;
}

// One [[peer]] entry.
// A [[peer]] entry; none when it has no addresses table (refused).
std::optional<PeerSpec> parse_peer(Checker& c, const toml::table& t, const Policy& p,
                                   std::map<std::string, std::string>& seen) {
  PeerSpec pe;
  pe.line = static_cast<int>(t.source().begin.line);
  pe.addr4.resize(p.paths.size());
  pe.addr6.resize(p.paths.size());
  c.only_keys(t, schema::section("peer").key_names(), "[[peer]]");
  if (auto v = c.string(t, "name", "[[peer]]", false)) pe.name = *v;
  std::string section = pe.name.empty() ? "[[peer]]" : fmt::format("peer \"{}\"", pe.name);
  auto* at = t.get("addresses");
  auto* addrs = at ? at->as_table() : nullptr;
  if (!addrs) {
    c.error(at ? *at : static_cast<const toml::node&>(t),
            fmt::format("{} needs addresses = {{ PATH = \"ADDRESS\", ... }}, its address on "
                        "each path (a list for IPv4 and IPv6)",
                        section));
    return std::nullopt;
  }
  std::vector<std::string> paths;
  for (auto& ps : p.paths) paths.push_back(ps.name);
  size_t given = 0;
  for (auto& [k, v] : *addrs) {
    int idx = p.path_index(std::string(k.str()));
    if (idx < 0) {
      auto near = nearest_name(k.str(), paths);
      c.error(v, fmt::format("{}: no path \"{}\" in the policy{}", section, k.str(),
                             near ? fmt::format("; did you mean \"{}\"?", *near) : ""));
      continue;
    }
    given += peer_addresses(c, section, k.str(), static_cast<size_t>(idx), v, seen, pe);
  }
  if (given && given < 2)
    c.error(t, fmt::format("{} has an address on one path only: the table moves connections "
                           "between paths, so it needs the peer's address on at least two",
                           section));
  return pe;
}

}  // namespace

// [[peer]]: name (optional), addresses = { PATH = "ADDR" | ["ADDR4", "ADDR6"] }.
void parse_peers(Checker& c, const toml::table& root, Policy& p) {
  auto* arr = entries(c, root, "peer", "", SIZE_MAX, "peers");
  if (!arr) return;
  if (p.topology != Topology::Separate) {
    c.error(*root.get("peer"),
            "[[peer]] is for the separate topology, where a connection is placed on a rail by "
            "its peer's address there; in the shared topology a peer has one address on every "
            "rail");
    return;
  }
  std::map<std::string, std::string> seen;  // address -> the peer that has it
  for (auto& e : *arr) {
    if (auto pe = parse_peer(c, *e.as_table(), p, seen)) p.peers.push_back(std::move(*pe));
  }
}

}  // namespace dp::policy_parts
