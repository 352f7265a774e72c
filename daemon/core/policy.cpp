// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "dualpath/abi.h"
#include "dualpath/core/policy_toml.h"
#include "dualpath/core/units.h"
#include "policy_checker.h"

namespace dp {

// ---------------------------------------------------------------- addresses

std::optional<IpAddr> IpAddr::parse(const std::string& text) {
  IpAddr a;
  if (inet_pton(AF_INET, text.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET;
    return a;
  }
  if (inet_pton(AF_INET6, text.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET6;
    return a;
  }
  return std::nullopt;
}

std::string IpAddr::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family == 0) return "";
  inet_ntop(family, bytes.data(), buf, sizeof(buf));
  return buf;
}

IpAddr IpAddr::unmapped() const {
  static constexpr std::array<uint8_t, 12> kMapped{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (family != AF_INET6 || !std::equal(kMapped.begin(), kMapped.end(), bytes.begin()))
    return *this;
  IpAddr v4;
  v4.family = AF_INET;
  std::copy(bytes.begin() + 12, bytes.end(), v4.bytes.begin());
  return v4;
}

std::optional<Prefix> Prefix::parse(const std::string& text) {
  if (text == "default") return Prefix{*IpAddr::parse("0.0.0.0"), 0};
  if (text == "default6") return Prefix{*IpAddr::parse("::"), 0};
  auto slash = text.find('/');
  auto addr = IpAddr::parse(text.substr(0, slash));
  if (!addr) return std::nullopt;
  int max = addr->family == AF_INET ? 32 : 128;
  int len = max;
  if (slash != std::string::npos) {
    std::string l = text.substr(slash + 1);
    if (l.empty() || l.size() > 3 || !std::all_of(l.begin(), l.end(), ::isdigit))
      return std::nullopt;
    len = std::stoi(l);
    if (len > max) return std::nullopt;
  }
  return Prefix{*addr, len};
}

bool Prefix::contains(const IpAddr& a) const {
  if (a.family != addr.family) return false;
  int whole = len / 8, rest = len % 8;
  if (!std::equal(addr.bytes.begin(), addr.bytes.begin() + whole, a.bytes.begin())) return false;
  if (!rest) return true;
  auto mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (addr.bytes[whole] & mask) == (a.bytes[whole] & mask);
}

std::string Prefix::str() const { return fmt::format("{}/{}", addr.str(), len); }

const char* to_string(Proto p) { return p == Proto::Tcp ? "tcp" : "udp"; }
const char* to_string(PortMatch m) {
  switch (m) {
    case PortMatch::Src:
      return "src";
    case PortMatch::Dst:
      return "dst";
    default:
      return "any";
  }
}
const char* to_string(ClassKind k) {
  return k == ClassKind::LatencySensitive ? "latency_sensitive" : "elastic";
}

std::string PortRange::str() const {
  if (lo == hi) return fmt::format("{}:{}", to_string(proto), lo);
  return fmt::format("{}:{}-{}", to_string(proto), lo, hi);
}

const PathSpec* Policy::path(const std::string& name) const {
  for (auto& p : paths)
    if (p.name == name) return &p;
  return nullptr;
}
const ClassSpec* Policy::klass(const std::string& name) const {
  for (auto& c : classes)
    if (c.name == name) return &c;
  return nullptr;
}
std::string CgroupSpec::str() const {
  return fmt::format("{} {}", kind == Kind::Unit ? "unit" : "cgroup", text);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest_name(std::string_view word,
                                        const std::vector<std::string>& names) {
  auto lower = [](std::string_view x) {
    std::string out(x);
    for (auto& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
  };
  std::string w = lower(word);
  std::optional<std::string> best;
  size_t best_d = SIZE_MAX;
  for (const auto& n : names)
    if (size_t d = edit_distance(w, lower(n)); d < best_d) best_d = d, best = n;
  size_t limit = w.size() <= 4 ? 1 : 2;
  if (best && best_d <= limit) return best;
  return std::nullopt;
}

std::string cgroup_path_problem(const std::string& path) {
  if (path.rfind("/sys/fs/cgroup", 0) == 0) {
    std::string rest = path.substr(std::string("/sys/fs/cgroup").size());
    return fmt::format(
        "is a filesystem path: cgroups are named from the cgroup v2 root, so "
        "write \"{}\"{}",
        rest.empty() ? "/" : rest,
        rest.size() > 8 && rest.ends_with(".service")
            ? fmt::format(", or units = [\"{}\"]", rest.substr(rest.rfind('/') + 1))
            : "");
  }
  if (path.empty() || path[0] != '/')
    return "must be a path from the cgroup v2 root, starting with '/' (such as "
           "\"/system.slice/vllm.service\")";
  if (path == "/") return "is the root cgroup; a class of every socket is default_class";
  if (path.size() > 4096) return "is longer than 4096 characters";
  if (path.back() == '/') return "must not end in '/'";
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    if (part.empty()) return "has an empty component ('//')";
    if (part == "." || part == "..") return "must not contain '.' or '..' components";
    if (part.size() > 255) return "has a component longer than 255 characters";
    for (unsigned char ch : part)
      if (ch < 0x20 || ch == 0x7f) return "contains a control character";
    start = end + 1;
  }
  return "";
}

std::string unit_name_problem(const std::string& unit) {
  static const std::regex re(R"([A-Za-z0-9:_.\\@-]+\.(service|scope|slice|socket))");
  if (unit.size() > 255) return "is longer than 255 characters";
  if (!std::regex_match(unit, re))
    return "is not a systemd unit name: letters, digits and \":-_.\\@\" ending in .service, "
           ".scope, .slice or .socket";
  if (unit.find('/') != std::string::npos) return "must not contain '/'";
  return "";
}

const char* to_string(Topology t) { return t == Topology::Separate ? "separate" : "shared"; }

namespace {
std::optional<Prefix> first_of(const std::vector<Prefix>& routes, int family) {
  for (const auto& r : routes)
    if (r.addr.family == family && r.len) return r;
  return std::nullopt;
}
}  // namespace

std::optional<Prefix> PathSpec::network() const { return first_of(routes, AF_INET); }
std::optional<Prefix> PathSpec::network6() const { return first_of(routes, AF_INET6); }

bool Policy::same_settings(const Policy& o) const {
  return node == o.node && cluster == o.cluster && group == o.group && group_hash == o.group_hash &&
         default_class == o.default_class && routing == o.routing && scheduler == o.scheduler &&
         topology == o.topology && health == o.health && measurement == o.measurement &&
         metrics == o.metrics && events == o.events && responder == o.responder && qos == o.qos &&
         nccl == o.nccl && paths == o.paths && classes == o.classes && peers == o.peers;
}

const PeerSpec* Policy::peer_of(const IpAddr& a, size_t* path) const {
  for (const auto& pe : peers) {
    const auto& list = a.family == AF_INET ? pe.addr4 : pe.addr6;
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i] == a) {
        if (path) *path = i;
        return &pe;
      }
  }
  return nullptr;
}

bool Policy::has_multipath() const {
  return std::any_of(classes.begin(), classes.end(),
                     [](const ClassSpec& c) { return c.multipath; });
}

size_t responder_ports(const Policy& p) { return p.paths.size() * (p.has_multipath() ? 2 : 1); }

std::vector<Prefix> Policy::responder_allowed() const {
  if (!responder.allow.empty()) return responder.allow;
  std::vector<Prefix> out;
  auto host = [](const IpAddr& a) { return Prefix{a, a.family == AF_INET ? 32 : 128}; };
  for (const auto& ps : paths) {
    out.insert(out.end(), ps.routes.begin(), ps.routes.end());
    for (const auto& a : {ps.gateway, ps.gateway6, ps.bfd_peer})
      if (a) out.push_back(host(*a));
  }
  return out;
}

int Policy::classify(Proto proto, uint16_t sport, uint16_t dport, uint32_t mark) const {
  mark &= routing.mark_mask & ~routing.redirect_mark;
  if (mark)
    for (const auto& ps : paths)
      if (ps.fwmark == mark) return -1;
  if (mark)
    for (size_t i = 0; i < classes.size(); ++i)
      if (classes[i].mark == mark) return static_cast<int>(i);
  auto by_port = [&](uint16_t port, PortMatch side) {
    for (size_t i = 0; i < classes.size(); ++i) {
      if (classes[i].match != PortMatch::Any && classes[i].match != side) continue;
      for (const auto& r : classes[i].ports)
        if (r.proto == proto && port >= r.lo && port <= r.hi) return static_cast<int>(i);
    }
    return -1;
  };
  if (int c = by_port(dport, PortMatch::Dst); c >= 0) return c;
  if (int c = by_port(sport, PortMatch::Src); c >= 0) return c;
  return default_class ? class_index(*default_class) : -1;
}

int Policy::class_index(const std::string& name) const {
  for (size_t i = 0; i < classes.size(); ++i)
    if (classes[i].name == name) return static_cast<int>(i);
  return -1;
}

int Policy::path_index(const std::string& name) const {
  for (size_t i = 0; i < paths.size(); ++i)
    if (paths[i].name == name) return static_cast<int>(i);
  return -1;
}

std::string Diagnostic::str() const {
  if (line == 0) return fmt::format("{}: error: {}", file, message);  // the file as a whole
  return fmt::format("{}:{}:{}: error: {}", file, line, column, message);
}

std::string content_hash(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

bool valid_name(const std::string& s) {
  static const std::regex re("[a-z0-9][a-z0-9_-]{0,30}");
  return std::regex_match(s, re);
}

std::string name_problem(std::string_view what, const std::string& s) {
  if (valid_name(s)) return "";
  return fmt::format("{} name \"{}\" must be 1-31 characters of a-z, 0-9, '-' or '_'", what, s);
}

PolicyLoad parse_policy(const std::string& text, const std::string& name) {
  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    PolicyLoad out;
    out.errors.push_back({name, static_cast<int>(e.source().begin.line),
                          static_cast<int>(e.source().begin.column), std::string(e.description())});
    return out;
  }
  return check_policy(root, text, name);
}

PolicyLoad check_policy(const toml::table& root, const std::string& text, const std::string& name) {
  PolicyLoad out;
  policy_parts::Checker c(name);
  Policy p;
  p.file = name;
  p.hash = content_hash(text);
  p.text = text;
  std::vector<std::string_view> sections, arrays;
  for (const auto& s : schema::sections()) {
    sections.push_back(s.name);
    if (s.array) arrays.push_back(s.name);
  }
  c.only_keys(root, sections, "the top level", arrays);
  using namespace policy_parts;
  parse_node(c, root, p);
  parse_routing(c, root, p);
  parse_scheduler(c, root, p);
  parse_health(c, root, p);
  parse_measurement(c, root, p);
  parse_paths(c, root, p);
  check_topology(c, root, p);
  parse_classes(c, root, p);
  parse_responder(c, root, p);
  check_responder(c, root, p);
  parse_qos(c, root, p);
  parse_nccl(c, root, p);
  parse_peers(c, root, p);
  out.errors = c.take();
  std::stable_sort(out.errors.begin(), out.errors.end(), [](auto& a, auto& b) {
    return std::tie(a.file, a.line, a.column) < std::tie(b.file, b.line, b.column);
  });
  if (out.errors.empty()) out.policy = std::move(p);
  return out;
}

PolicyLoad load_policy_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    PolicyLoad out;
    out.errors.push_back(
        {path, 0, 0, fmt::format("cannot read the file: {}", std::strerror(errno))});
    return out;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_policy(ss.str(), path);
}

EphemeralPorts parse_ephemeral_ports(const std::string& range, const std::string& reserved) {
  EphemeralPorts e;
  std::istringstream r(range);
  if (!(r >> e.lo >> e.hi) || e.lo > e.hi || e.hi > 65535) e.lo = e.hi = 0;
  std::stringstream ss(reserved);
  for (std::string item; std::getline(ss, item, ',');) {
    unsigned a = 0, b = 0;
    int n = std::sscanf(item.c_str(), "%u-%u", &a, &b);
    if (n < 1) continue;
    if (n == 1 || b < a) b = a;
    for (unsigned x = a; x <= b && x < 65536; ++x) e.reserved[x] = true;
  }
  return e;
}

std::vector<std::string> ephemeral_port_warnings(const Policy& p, const EphemeralPorts& e) {
  std::vector<std::string> out;
  if (!e.lo && !e.hi) return out;
  for (const auto& c : p.classes) {
    if (c.match == PortMatch::Dst) continue;  // source ports are not matched
    for (const auto& r : c.ports) {
      unsigned n = 0, first = 0, last = 0;
      for (unsigned x = std::max<unsigned>(r.lo, e.lo); x <= std::min<unsigned>(r.hi, e.hi); ++x)
        if (!e.reserved[x]) {
          if (!n) first = x;
          last = x;
          ++n;
        }
      if (n)
        out.push_back(fmt::format(
            "{}:{}: warning: class {}: {} of its ports {} are in the ephemeral port range {}-{}: "
            "any "
            "connection given such a source port is classified as {}; reserve them: add {} to "
            "net.ipv4.ip_local_reserved_ports (a list: keep what it holds)",
            p.file, r.line, c.name, n, r.str(), e.lo, e.hi, c.name,
            first == last ? std::to_string(first) : fmt::format("{}-{}", first, last)));
    }
  }
  return out;
}

}  // namespace dp
