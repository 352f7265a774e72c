// SPDX-License-Identifier: Apache-2.0
// [[class]]: the traffic classes, and [qos]. Their typed keys are read as
// declared (policy_schema_entries.cpp); here are the values of a form of
// their own (port ranges, cgroup rules, DSCP, skb->priority, reserves) and
// the rules across a class's keys and across classes.
#include <map>
#include <regex>

#include "dualpath/abi.h"
#include "dualpath/core/units.h"
#include "policy_checker.h"

namespace dp::policy_parts {

namespace {

// "EF", "CS0".."CS7", "AF11".."AF43" (RFC 2474, 2597, 3246), case-insensitive.
std::optional<int> parse_dscp(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (s == "EF") return 46;
  if (s.size() == 3 && s.rfind("CS", 0) == 0 && s[2] >= '0' && s[2] <= '7') return (s[2] - '0') * 8;
  if (s.size() == 4 && s.rfind("AF", 0) == 0 && s[2] >= '1' && s[2] <= '4' && s[3] >= '1' &&
      s[3] <= '3')
    return (s[2] - '0') * 8 + (s[3] - '0') * 2;
  return std::nullopt;
}

// A tc class id, "1:10" (hexadecimal, as tc writes them) -> 0x00010010.
std::optional<int64_t> parse_tc_handle(const std::string& s) {
  static const std::regex re("([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,4})");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return std::nullopt;
  return std::stoll(m[1].str(), nullptr, 16) << 16 | std::stoll(m[2].str(), nullptr, 16);
}

std::optional<PortRange> parse_port_range(Checker& c, const toml::node& n, std::string_view cls) {
  auto s = n.as_string();
  std::string section = fmt::format("class \"{}\"", cls);
  if (!s) {
    c.error(n, fmt::format("ports in {} must be strings like \"tcp:50000-50999\"", section));
    return std::nullopt;
  }
  static const std::regex re("(tcp|udp):([0-9]{1,5})(-([0-9]{1,5}))?");
  std::smatch m;
  const std::string& text = s->get();
  if (!std::regex_match(text, m, re)) {
    c.error(n, fmt::format("port range \"{}\" in {} is malformed: write \"tcp:LO-HI\", "
                           "\"udp:LO-HI\" or \"tcp:PORT\"",
                           text, section));
    return std::nullopt;
  }
  long lo = std::stol(m[2]);
  long hi = m[4].matched ? std::stol(m[4]) : lo;
  if (lo < 1 || lo > 65535 || hi < 1 || hi > 65535) {
    c.error(n, fmt::format("port range \"{}\" in {} is out of range (ports are 1 to 65535)", text,
                           section));
    return std::nullopt;
  }
  if (hi < lo) {
    c.error(n, fmt::format("port range \"{}\" in {} is reversed: {} is above {}", text, section, lo,
                           hi));
    return std::nullopt;
  }
  PortRange r;
  r.proto = m[1] == "tcp" ? Proto::Tcp : Proto::Udp;
  r.lo = static_cast<uint16_t>(lo);
  r.hi = static_cast<uint16_t>(hi);
  r.line = static_cast<int>(n.source().begin.line);
  r.column = static_cast<int>(n.source().begin.column);
  return r;
}

bool matches_overlap(PortMatch a, PortMatch b) {
  return a == PortMatch::Any || b == PortMatch::Any || a == b;
}

// Port ranges of two classes may not overlap (same protocol, intersecting
// direction). A sweep over the ranges sorted by their start, per protocol and
// direction, finds every range that overlaps an earlier one of another class
// in O(n log n); at most kMaxOverlaps are reported (a file listing one port
// thousands of times in two classes once made 16 million messages).
constexpr size_t kMaxOverlaps = 20;

void check_port_overlaps(Checker& c, const Policy& p) {
  struct Entry {
    const PortRange* r;
    size_t cls;
  };
  std::set<std::pair<const PortRange*, const PortRange*>> reported;
  size_t more = 0;
  toml::source_region last{};  // the furthest overlap not reported, for the summary
  auto report = [&](const Entry& x, const Entry& y) {
    const Entry& later = x.cls > y.cls ? x : y;
    const Entry& earlier = x.cls > y.cls ? y : x;
    if (!reported.insert({later.r, earlier.r}).second) return;
    if (reported.size() > kMaxOverlaps) {
      ++more;
      auto line = static_cast<toml::source_index>(later.r->line);
      auto column = static_cast<toml::source_index>(later.r->column);
      if (line > last.begin.line || (line == last.begin.line && column > last.begin.column)) {
        last.begin.line = line;
        last.begin.column = column;
      }
      return;
    }
    toml::source_region at{};
    at.begin.line = static_cast<toml::source_index>(later.r->line);
    at.begin.column = static_cast<toml::source_index>(later.r->column);
    c.error(at, fmt::format("port range {} of class \"{}\" overlaps {} of class \"{}\" (line {})",
                            later.r->str(), p.classes[later.cls].name, earlier.r->str(),
                            p.classes[earlier.cls].name, earlier.r->line));
  };
  for (PortMatch side : {PortMatch::Dst, PortMatch::Src}) {
    std::vector<Entry> v;
    for (size_t i = 0; i < p.classes.size(); ++i)
      if (matches_overlap(p.classes[i].match, side))
        for (const auto& r : p.classes[i].ports) v.push_back({&r, i});
    std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.r->proto, a.r->lo) < std::tie(b.r->proto, b.r->lo);
    });
    // the furthest-reaching range so far, and the furthest of another class
    std::optional<Entry> best, other;
    for (const auto& e : v) {
      if (best && best->r->proto != e.r->proto) best.reset(), other.reset();
      if (best && best->cls != e.cls && best->r->hi >= e.r->lo)
        report(*best, e);
      else if (other && other->r->hi >= e.r->lo)
        report(*other, e);
      if (!best || e.r->hi > best->r->hi) {
        if (best && best->cls != e.cls) other = best;
        best = e;
      } else if (e.cls != best->cls && (!other || e.r->hi > other->r->hi)) {
        other = e;
      }
    }
  }
  if (more) c.error(last, fmt::format("... and {} more overlapping port ranges", more));
}

// cgroups = ["/system.slice/x.service"], units = ["x.service"]: each rule
// belongs to one class.
void parse_cgroups(Checker& c, const toml::table& t, const std::string& section, ClassSpec& cs,
                   std::map<std::string, std::string>& owner) {
  for (auto [key, kind] :
       {std::pair{"cgroups", CgroupSpec::Kind::Path}, std::pair{"units", CgroupSpec::Kind::Unit}}) {
    const toml::node* n = t.get(key);
    if (!n) continue;
    auto* a = n->as_array();
    if (!a) {
      c.error(*n, fmt::format("{} of {} must be an array like {}", key, section,
                              kind == CgroupSpec::Kind::Unit ? "[\"vllm.service\"]"
                                                             : "[\"/system.slice/vllm.service\"]"));
      continue;
    }
    for (auto& e : *a) {
      auto* str = e.as_string();
      if (!str) {
        c.error(e, fmt::format("{} of {} must be strings", key, section));
        continue;
      }
      CgroupSpec g;
      g.kind = kind;
      g.text = str->get();
      g.line = static_cast<int>(e.source().begin.line);
      g.column = static_cast<int>(e.source().begin.column);
      std::string problem =
          kind == CgroupSpec::Kind::Unit ? unit_name_problem(g.text) : cgroup_path_problem(g.text);
      if (!problem.empty()) {
        c.error(
            e, fmt::format("{} \"{}\" of {} {}", kind == CgroupSpec::Kind::Unit ? "unit" : "cgroup",
                           g.text, section, problem));
        continue;
      }
      auto [it, fresh] = owner.emplace(g.str(), cs.name);
      if (!fresh) {
        c.error(e, fmt::format("{} is already a rule of class \"{}\"", g.str(), it->second));
        continue;
      }
      cs.cgroups.push_back(std::move(g));
    }
  }
}

}  // namespace

// A DSCP key: a number 0-63 or a name. `where` names the section for errors.
std::optional<uint8_t> parse_dscp_key(Checker& c, const toml::table& t, const char* key,
                                      const std::string& where) {
  const toml::node* dn = t.get(key);
  if (!dn) return std::nullopt;
  // the range is checked on the 64-bit value: 4294967342 is not 46
  std::optional<int64_t> d;
  if (auto* i = dn->as_integer())
    d = i->get();
  else if (auto* str = dn->as_string())
    if (auto x = parse_dscp(str->get())) d = *x;
  if (!d || *d < 0 || *d > 63) {
    c.error(*dn, fmt::format("{} of {} must be 0-63 or a name such as \"EF\", \"AF41\" or "
                             "\"CS1\"",
                             key, where));
    return std::nullopt;
  }
  return static_cast<uint8_t>(*d);
}

// An skb->priority key: a band 0-7, or a tc class id written as a string.
std::optional<uint32_t> parse_skb_priority_key(Checker& c, const toml::table& t, const char* key,
                                               const std::string& where) {
  const toml::node* sn = t.get(key);
  if (!sn) return std::nullopt;
  std::optional<int64_t> v;
  bool number = false;
  if (auto* i = sn->as_integer())
    v = i->get(), number = true;
  else if (auto* str = sn->as_string())
    if (auto x = parse_tc_handle(str->get())) v = *x;
  if (number && v && *v > 7) {
    c.error(*sn, fmt::format("{} = {} of {} is out of range: a number is a priority band, 0-7; "
                             "a tc class is written as a string such as \"1:10\"",
                             key, *v, where));
    return std::nullopt;
  }
  if (!v || *v < 0 || *v > 0xFFFFFFFFll) {
    c.error(*sn,
            fmt::format("{} of {} must be a number or a tc class id such as \"1:10\"", key, where));
    return std::nullopt;
  }
  return static_cast<uint32_t>(*v);
}

namespace {

// A class's QoS on the wire: dscp (a number or a name) and skb_priority (a
// band or a tc class id).
void parse_class_qos(Checker& c, const toml::table& t, const std::string& section, ClassSpec& cs) {
  if (auto d = parse_dscp_key(c, t, "dscp", section)) cs.dscp = *d;
  if (auto v = parse_skb_priority_key(c, t, "skb_priority", section)) cs.skb_priority = *v;
}

// A multipath class's sockets are made MPTCP at socket(), when only the
// task's cgroup is known: a class matched by cgroups or units converts its
// processes' sockets. A class matched only by ports or a mark converts
// nothing itself; its connections are MPTCP when their process is in a
// converting class's cgroup (they are then managed with this class's
// decision and QoS), so it needs such a class beside it.
void check_multipath(Checker& c, const toml::table& root, const Policy& p) {
  auto* arr = root.get("class") ? root.get("class")->as_array() : nullptr;
  if (!arr) return;
  auto converts = [&](size_t i) {
    const auto& t = *(*arr)[i].as_table();
    return p.classes[i].multipath && (t.get("cgroups") || t.get("units"));
  };
  bool any = false;
  for (size_t i = 0; i < p.classes.size() && i < arr->size(); ++i) any = any || converts(i);
  if (any) return;
  for (size_t i = 0; i < p.classes.size() && i < arr->size(); ++i) {
    if (!p.classes[i].multipath) continue;
    c.error(where(*(*arr)[i].as_table(), "multipath"),
            fmt::format("multipath in class \"{}\" needs MPTCP sockets, which are made when "
                        "they are created, before a port or a mark is known: match the class "
                        "by cgroups or units, or give the policy a multipath class that does "
                        "(its processes' connections to this class are then MPTCP)",
                        p.classes[i].name));
  }
}

// A class's reserve: a rate ("50mbit") or a share of a rail ("10%").
void parse_class_reserve(Checker& c, const toml::table& t, const std::string& section,
                         ClassSpec& cs) {
  auto v = c.string(t, "reserve", section, false);
  if (!v) return;
  const toml::node& rn = *t.get("reserve");
  if (!v->empty() && v->back() == '%') {
    std::string num = v->substr(0, v->size() - 1);
    char* end = nullptr;
    double pct = std::strtod(num.c_str(), &end);
    if (num.empty() || end != num.c_str() + num.size() || !(pct > 0) || !(pct < 100))
      c.error(rn, fmt::format("reserve = \"{}\" of {}: a share must be above 0% and below 100%", *v,
                              section));
    else
      cs.reserve_share = pct / 100;
    return;
  }
  auto bw = parse_bandwidth(*v);
  if (!bw)
    c.error(rn, fmt::format("reserve of {}: {} (or a share of a rail such as \"10%\")", section,
                            bw.error().message));
  else
    cs.reserve_bps = *bw;
}

// The reserves on each rail leave room for the classes without one.
void check_reserves(Checker& c, const toml::table& root, const Policy& p) {
  auto* arr = root.get("class") ? root.get("class")->as_array() : nullptr;
  if (!arr) return;
  for (const auto& ps : p.paths) {
    if (!ps.capacity_bps) continue;
    uint64_t sum = 0;
    std::vector<std::string> names;
    for (size_t i = 0; i < p.classes.size() && i < arr->size(); ++i) {
      uint64_t r = p.classes[i].reserve_on(ps.capacity_bps);
      if (!r) continue;
      sum += r;
      names.push_back(p.classes[i].name);
      if (sum < ps.capacity_bps) continue;
      const auto& t = *(*arr)[i].as_table();
      c.error(where(t, "reserve"),
              fmt::format("the reserves of {} add up to {} on path \"{}\", whose capacity is "
                          "{}: the classes without a reserve would have nothing left there",
                          fmt::join(names, ", "), format_bandwidth(static_cast<double>(sum)),
                          ps.name, format_bandwidth(static_cast<double>(ps.capacity_bps))));
      return;
    }
  }
}

// A class's socket mark: inside the policy's mark bits, not the redirect
// bit, not another class's or a path's fwmark.
void class_mark(Checker& c, const toml::table& t, const std::string& section, const Policy& p,
                std::map<uint32_t, std::string>& marks, const ClassSpec& cs) {
  const uint32_t m = *cs.mark;
  if (m & p.routing.redirect_mark)
    c.error(where(t, "mark"), fmt::format("mark {:#x} of {} uses bit {:#x}, which dualpath "
                                          "reserves for redirected packets ([routing] "
                                          "redirect_mark)",
                                          m, section, p.routing.redirect_mark));
  else if (m & ~p.routing.mark_mask)
    c.error(where(t, "mark"), fmt::format("mark {:#x} of {} has bits outside [routing] mark_mask "
                                          "{:#x}, which belong to others",
                                          m, section, p.routing.mark_mask));
  else if (marks.count(m))
    c.error(where(t, "mark"), fmt::format("mark {:#x} of {} is already the mark of class \"{}\"", m,
                                          section, marks[m]));
  else if (std::any_of(p.paths.begin(), p.paths.end(),
                       [m](const PathSpec& ps) { return ps.fwmark == m; }))
    c.error(where(t, "mark"), fmt::format("mark {:#x} of {} is a path's fwmark; class marks and "
                                          "path fwmarks must differ",
                                          m, section));
  else
    marks[m] = cs.name;
}

// The path a class prefers, which the policy must define.
void class_prefer(Checker& c, const toml::table& t, const std::string& section, const Policy& p,
                  const ClassSpec& cs) {
  if (!t.get("prefer") || !t.get("prefer")->is_string() || p.path(cs.prefer)) return;
  std::vector<std::string> paths;
  for (const auto& ps : p.paths) paths.push_back(ps.name);
  auto near = nearest_name(cs.prefer, paths);
  c.error(
      where(t, "prefer"),
      fmt::format("{} prefers path \"{}\", which the policy does not define{} (paths: {})", section,
                  cs.prefer, near ? fmt::format("; did you mean \"{}\"?", *near) : "",
                  paths.empty() ? std::string("none") : fmt::format("{}", fmt::join(paths, ", "))));
}

// ports: an array of port ranges.
void class_ports(Checker& c, const toml::table& t, const std::string& section, ClassSpec& cs) {
  const toml::node* pn = t.get("ports");
  if (!pn) return;
  auto* pa = pn->as_array();
  if (!pa) {
    c.error(*pn, fmt::format("ports of {} must be an array like [\"tcp:50000-50999\"]", section));
    return;
  }
  for (auto& pe : *pa)
    if (auto r = parse_port_range(c, pe, cs.name)) cs.ports.push_back(*r);
}

// A class some traffic can match: it has ports, a mark, cgroups or units.
void class_matches_something(Checker& c, const toml::table& t, const std::string& section,
                             const ClassSpec& cs) {
  size_t rules_written = 0;  // a rule written wrong has its own error already
  for (auto key : {"ports", "cgroups", "units"})
    if (const toml::node* rn = t.get(key))
      rules_written += rn->as_array() ? rn->as_array()->size() : 1;
  if (!cs.mark && !t.get("mark") && rules_written == 0)
    c.error(t.get("ports") ? *t.get("ports") : static_cast<const toml::node&>(t),
            fmt::format("{} has no ports, mark, cgroups or units: no traffic could ever match it",
                        section));
}

// What every class's rules together must hold.
struct ClassesSeen {
  std::set<std::string> names;
  std::map<uint32_t, std::string> marks;
  std::map<std::string, std::string> cgroup_owner;  // rule -> class
};

ClassSpec parse_class(Checker& c, const toml::table& t, Policy& p, ClassesSeen& seen) {
  const auto& decl = schema::section("class");
  ClassSpec cs;
  schema::Target target{p, nullptr, &cs};
  std::string section = "[[class]]";
  c.only_keys(t, decl.key_names(), section);
  if (auto v = c.string(t, "name", section, true)) {
    cs.name = *v;
    section = fmt::format("class \"{}\"", *v);
    if (auto bad = name_problem("class", *v); !bad.empty())
      c.error(where(t, "name"), bad);
    else if (!seen.names.insert(*v).second)
      c.error(where(t, "name"), fmt::format("duplicate class name \"{}\"", *v));
  }
  c.read_keys(t, decl, section, target, {"name"});
  if (cs.kind == ClassKind::LatencySensitive && !t.get("rto_min"))
    cs.rto_min = kDefaultLatencyRtoMin;
  class_prefer(c, t, section, p, cs);
  parse_class_qos(c, t, section, cs);
  if (cs.mark) class_mark(c, t, section, p, seen.marks, cs);
  class_ports(c, t, section, cs);
  parse_cgroups(c, t, section, cs, seen.cgroup_owner);
  parse_class_reserve(c, t, section, cs);
  class_matches_something(c, t, section, cs);
  return cs;
}

}  // namespace

void parse_classes(Checker& c, const toml::table& root, Policy& p) {
  auto* arr = entries(c, root, "class", "the policy has no [[class]] sections", DP_MAX_CLASSES - 1,
                      "classes");
  if (!arr) return;
  ClassesSeen seen;
  for (auto& e : *arr) p.classes.push_back(parse_class(c, *e.as_table(), p, seen));
  check_port_overlaps(c, p);
  check_reserves(c, root, p);
  check_multipath(c, root, p);
  if (p.default_class && !p.klass(*p.default_class)) {
    auto* t = root.get_as<toml::table>("node");
    c.error(t ? where(*t, "default_class") : static_cast<const toml::node&>(root),
            fmt::format("default_class \"{}\" is not a class of this policy", *p.default_class));
  }
}

// [qos]: the pure ACKs' dscp and skb_priority, for every class.
void parse_qos(Checker& c, const toml::table& root, Policy& p) {
  auto* t = read_section(c, root, "qos", p);
  if (!t) return;
  p.qos.ack_dscp = parse_dscp_key(c, *t, "ack_dscp", "[qos]");
  p.qos.ack_skb_priority = parse_skb_priority_key(c, *t, "ack_skb_priority", "[qos]");
}

}  // namespace dp::policy_parts
