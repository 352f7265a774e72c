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
         metrics == o.metrics && responder == o.responder && qos == o.qos && nccl == o.nccl &&
         paths == o.paths && classes == o.classes && peers == o.peers;
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

// ---------------------------------------------------------------- checker

namespace {

class Checker {
 public:
  explicit Checker(std::string file) : file_(std::move(file)) {}

  // A node read from another file (a cluster description's, when dpctl
  // policy render checks a node's policy) is named by that file.
  void error(const toml::source_region& at, std::string msg) {
    errors_.push_back({at.path && !at.path->empty() ? *at.path : file_,
                       static_cast<int>(at.begin.line), static_cast<int>(at.begin.column),
                       std::move(msg)});
  }
  void error(const toml::node& at, std::string msg) { error(at.source(), std::move(msg)); }

  std::vector<Diagnostic> take() { return std::move(errors_); }
  std::vector<std::string> unknown_;

  // Refuses keys not in `allowed`, naming the section they are in.
  // At the top level the keys are sections: [node], [[path]], ...; `arrays`
  // are those written [[...]].
  void only_keys(const toml::table& t, std::initializer_list<std::string_view> allowed,
                 std::string_view section, std::initializer_list<std::string_view> arrays = {}) {
    for (auto& [k, v] : t) {
      if (std::find(allowed.begin(), allowed.end(), k.str()) != allowed.end()) continue;
      std::string list;
      std::vector<std::string> names;
      auto shown = [&](std::string_view a) {
        if (section != "the top level") return std::string(a);
        bool array = std::find(arrays.begin(), arrays.end(), a) != arrays.end();
        return array ? fmt::format("[[{}]]", a) : fmt::format("[{}]", a);
      };
      for (auto a : allowed) {
        list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
        names.emplace_back(std::string(a));
      }
      auto near = nearest_name(k.str(), names);
      std::string what = fmt::format("unknown key \"{}\" in {}", k.str(), section);
      error(k.source().begin.line ? k.source() : v.source(),
            fmt::format(
                "{}{} (allowed: {})", what,
                near ? fmt::format("; did you mean {}?",
                                   section == "the top level" ? shown(*near) : "\"" + *near + "\"")
                     : "",
                list));
      unknown_.emplace_back(k.str());
    }
  }
  // Keys only_keys() refused (a misspelt section is not also a missing one).
  bool refused_like(std::string_view name) const {
    for (const auto& u : unknown_)
      if (nearest_name(u, {std::string(name)})) return true;
    return false;
  }

  std::optional<std::string> string(const toml::table& t, std::string_view key,
                                    std::string_view section, bool required) {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) error(t, fmt::format("{} is missing the required key \"{}\"", section, key));
      return std::nullopt;
    }
    if (auto s = n->as_string()) return s->get();
    error(*n, fmt::format("\"{}\" in {} must be a string", key, section));
    return std::nullopt;
  }

  // One of a key's words, as its value: refused, naming every word, when it
  // is none of them ("KEY in SECTION must be "a", "b" or "c", not "x"",
  // then `why`, which says what the words mean where that helps).
  template <class T>
  std::optional<T> choice(const toml::table& t, std::string_view key, std::string_view section,
                          bool required,
                          std::initializer_list<std::pair<std::string_view, T>> words,
                          std::string_view why = {}) {
    auto v = string(t, key, section, required);
    if (!v) return std::nullopt;
    std::string all;
    size_t i = 0;
    for (const auto& [word, value] : words) {
      if (*v == word) return value;
      all += i == 0 ? "" : i + 1 == words.size() ? " or " : ", ";
      all += fmt::format("\"{}\"", word);
      ++i;
    }
    error(*t.get(key),
          fmt::format("{} in {} must be {}, not \"{}\"{}", key, section, all, *v, why));
    return std::nullopt;
  }

  std::optional<bool> boolean(const toml::table& t, std::string_view key,
                              std::string_view section) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (auto b = n->as_boolean()) return b->get();
    error(*n, fmt::format("{} in {} must be true or false", key, section));
    return std::nullopt;
  }

  std::optional<int64_t> integer(const toml::table& t, std::string_view key,
                                 std::string_view section, bool required, int64_t lo, int64_t hi) {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) error(t, fmt::format("{} is missing the required key \"{}\"", section, key));
      return std::nullopt;
    }
    auto i = n->as_integer();
    if (!i) {
      error(*n, fmt::format("\"{}\" in {} must be an integer", key, section));
      return std::nullopt;
    }
    if (i->get() < lo || i->get() > hi) {
      error(*n, fmt::format("\"{}\" = {} in {} is out of range ({} to {})", key, i->get(), section,
                            lo, hi));
      return std::nullopt;
    }
    return i->get();
  }

  std::optional<double> fraction(const toml::table& t, std::string_view key,
                                 std::string_view section, double lo, double hi) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    std::optional<double> v;
    if (auto f = n->as_floating_point()) v = f->get();
    if (auto i = n->as_integer()) v = static_cast<double>(i->get());
    if (!v) {
      error(*n, fmt::format("\"{}\" in {} must be a number", key, section));
      return std::nullopt;
    }
    if (!std::isfinite(*v) || *v <= lo || *v > hi) {
      error(*n, fmt::format("\"{}\" = {} in {} must be above {} and at most {}", key, *v, section,
                            lo, hi));
      return std::nullopt;
    }
    return v;
  }

  std::optional<std::chrono::nanoseconds> duration(
      const toml::table& t, std::string_view key, std::string_view section,
      std::chrono::nanoseconds min, std::chrono::nanoseconds max = std::chrono::hours(24 * 365),
      const char* why = nullptr) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_string()) {
      error(*n, fmt::format("\"{}\" in {} must be a duration string with its unit, such as "
                            "\"500ms\", \"30s\" or \"5m\"{}",
                            key, section,
                            n->is_number() ? fmt::format(" (not the bare number {})",
                                                         n->value<double>().value_or(0))
                                           : ""));
      return std::nullopt;
    }
    auto s = string(t, key, section, false);
    if (!s) return std::nullopt;
    auto d = parse_duration(*s);
    if (!d) {
      error(*t.get(key), fmt::format("\"{}\" in {}: {}", key, section, d.error().message));
      return std::nullopt;
    }
    if (*d < min) {
      error(*t.get(key),
            fmt::format("\"{}\" in {} must be at least {}", key, section, format_duration(min)));
      return std::nullopt;
    }
    if (*d > max) {
      error(*t.get(key), fmt::format("\"{}\" in {} must be at most {}{}", key, section,
                                     format_duration(max), why ? why : ""));
      return std::nullopt;
    }
    return *d;
  }

  std::optional<IpAddr> address(const toml::table& t, std::string_view key,
                                std::string_view section, int family) {
    auto s = string(t, key, section, false);
    if (!s) return std::nullopt;
    auto a = IpAddr::parse(*s);
    if (!a || (family && a->family != family)) {
      error(*t.get(key), fmt::format("\"{}\" in {} must be an {} address, not \"{}\"", key, section,
                                     family == AF_INET    ? "IPv4"
                                     : family == AF_INET6 ? "IPv6"
                                                          : "IP",
                                     *s));
      return std::nullopt;
    }
    return a;
  }

 private:
  std::string file_;
  std::vector<Diagnostic> errors_;
};

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

}  // namespace

bool valid_name(const std::string& s) {
  static const std::regex re("[a-z0-9][a-z0-9_-]{0,30}");
  return std::regex_match(s, re);
}

namespace {

// The kernel's rule for a network interface name (dev_valid_name): 1-15
// bytes, not "." or "..", no '/', ':', whitespace or NUL.
std::string interface_name_problem(const std::string& n) {
  if (n.empty()) return "it is empty";
  if (n.size() > 15) return fmt::format("{} bytes; the kernel allows 15", n.size());
  if (n == "." || n == "..") return "the kernel refuses \".\" and \"..\"";
  for (unsigned char ch : n) {
    if (ch == 0) return "it contains a NUL byte";
    if (ch == '/' || ch == ':') return fmt::format("it contains '{}'", static_cast<char>(ch));
    if (std::isspace(ch) || ch < 0x20 || ch == 0x7f)
      return "it contains whitespace or a control character";
  }
  return "";
}

// A name for a message: control bytes escaped.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s)
    out += ch < 0x20 || ch == 0x7f ? fmt::format("\\x{:02x}", ch)
                                   : std::string(1, static_cast<char>(ch));
  return out;
}

// ADDRESS:PORT with an IPv4 address, [IPv6] or localhost, and a port 1-65535.
bool valid_listen(const std::string& v) {
  size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon + 1 >= v.size() || v.size() - colon - 1 > 5) return false;
  std::string host = v.substr(0, colon), port = v.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos) return false;
  long n = std::stol(port);
  if (n < 1 || n > 65535) return false;
  if (host == "localhost") return true;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    auto a = IpAddr::parse(host.substr(1, host.size() - 2));
    return a && a->family == AF_INET6;
  }
  auto a = IpAddr::parse(host);
  return a && a->family == AF_INET;
}

const toml::node& where(const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  return n ? *n : static_cast<const toml::node&>(t);
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

void parse_node(Checker& c, const toml::table& root, Policy& p) {
  auto* t = root.get_as<toml::table>("node");
  if (!t) {
    if (!c.refused_like("node"))
      c.error(root.source(), "the policy has no [node] section (it needs at least name = \"...\")");
    return;
  }
  c.only_keys(*t, {"name", "default_class", "topology", "cluster", "group", "group_hash"},
              "[node]");
  if (auto v =
          c.choice<Topology>(*t, "topology", "[node]", false,
                             {{"shared", Topology::Shared}, {"separate", Topology::Separate}},
                             ": shared when both rails reach the peers' addresses, separate when "
                             "each rail is its own network"))
    p.topology = *v;
  if (auto n = c.string(*t, "name", "[node]", true)) {
    if (!valid_name(*n))
      c.error(where(*t, "name"),
              fmt::format("node name \"{}\" must be 1-31 characters of a-z, 0-9, '-' or '_'", *n));
    else
      p.node = *n;
  }
  p.default_class = c.string(*t, "default_class", "[node]", false);
  // Written by dpctl policy render: which cluster description and group the
  // node's policy came from, and the hash of that group's settings (the
  // fleet's drift alert compares it across a group's nodes).
  for (auto [key, field] : {std::pair{"cluster", &p.cluster}, std::pair{"group", &p.group}}) {
    if (auto v = c.string(*t, key, "[node]", false)) {
      if (!valid_name(*v))
        c.error(
            where(*t, key),
            fmt::format("{} name \"{}\" must be 1-31 characters of a-z, 0-9, '-' or '_'", key, *v));
      else
        *field = *v;
    }
  }
  if (auto v = c.string(*t, "group_hash", "[node]", false)) {
    if (v->size() != 16 || v->find_first_not_of("0123456789abcdef") != std::string::npos)
      c.error(where(*t, "group_hash"),
              fmt::format("group_hash \"{}\" must be 16 hex digits (dpctl policy render writes it)",
                          printable(*v)));
    else
      p.group_hash = *v;
  }
}

void parse_routing(Checker& c, const toml::table& root, Policy& p) {
  auto* t = root.get_as<toml::table>("routing");
  if (!t) return;
  c.only_keys(*t, {"rule_priority", "route_protocol", "mark_mask", "redirect_mark"}, "[routing]");
  if (auto v = c.integer(*t, "mark_mask", "[routing]", false, 1, 0xFFFFFFFFll))
    p.routing.mark_mask = static_cast<uint32_t>(*v);
  if (auto v = c.integer(*t, "redirect_mark", "[routing]", false, 1, 0xFFFFFFFFll)) {
    auto bit = static_cast<uint32_t>(*v);
    if (__builtin_popcount(bit) != 1)
      c.error(*t->get("redirect_mark"),
              fmt::format("redirect_mark {:#x} in [routing] must be a single bit", bit));
    else
      p.routing.redirect_mark = bit;
  }
  if (!(p.routing.redirect_mark & p.routing.mark_mask))
    c.error(t->get("redirect_mark") ? *t->get("redirect_mark") : *t->get("mark_mask"),
            fmt::format("redirect_mark {:#x} in [routing] is outside mark_mask {:#x}: dualpath "
                        "may only use bits of its mask",
                        p.routing.redirect_mark, p.routing.mark_mask));
  if (auto v = c.integer(*t, "rule_priority", "[routing]", false, 1, 32000))
    p.routing.rule_priority = static_cast<uint32_t>(*v);
  if (auto v = c.integer(*t, "route_protocol", "[routing]", false, 5, 254))
    p.routing.route_protocol = static_cast<uint8_t>(*v);
}

void parse_scheduler(Checker& c, const toml::table& root, Policy& p) {
  auto* t = root.get_as<toml::table>("scheduler");
  if (!t) return;
  const char* s = "[scheduler]";
  c.only_keys(*t,
              {"mode", "load_threshold", "latency_tolerance", "dead_zone", "cooldown",
               "ewma_weight", "tick", "flowlet_gap", "adaptive_flowlet_gap", "flowcell",
               "flowcell_order", "peak_window", "hold", "placement"},
              s);
  auto& k = p.scheduler;
  if (auto v = c.choice<bool>(*t, "mode", s, false, {{"adaptive", true}, {"static", false}}))
    k.adaptive = *v;
  if (auto v = c.fraction(*t, "load_threshold", s, 0, 1)) k.load_threshold = *v;
  if (auto v = c.fraction(*t, "ewma_weight", s, 0, 1)) k.ewma_weight = *v;
  using std::chrono::nanoseconds;
  if (auto v = c.duration(*t, "latency_tolerance", s, nanoseconds(0))) k.latency_tolerance = *v;
  if (auto v = c.duration(*t, "dead_zone", s, nanoseconds(0))) k.dead_zone = *v;
  if (auto v = c.duration(*t, "cooldown", s, nanoseconds(0))) k.cooldown = *v;
  if (auto v = c.duration(*t, "tick", s, std::chrono::milliseconds(1), std::chrono::seconds(1),
                          ": the daemon tells the systemd watchdog it is alive once per tick "
                          "(the unit's WatchdogSec is 10s), and health and decisions wait for it"))
    k.tick = *v;
  if (auto v = c.duration(*t, "flowlet_gap", s, nanoseconds(0))) k.flowlet_gap = *v;
  if (const toml::node* n = t->get("adaptive_flowlet_gap")) {
    if (auto b = n->as_boolean())
      k.adaptive_flowlet_gap = b->get();
    else
      c.error(*n, "adaptive_flowlet_gap in [scheduler] must be true or false");
  }
  if (auto v = c.duration(*t, "peak_window", s, nanoseconds(0), std::chrono::seconds(10)))
    k.peak_window = *v;
  if (auto v = c.duration(*t, "hold", s, nanoseconds(0), std::chrono::minutes(10))) k.hold = *v;
  if (const toml::node* n = t->get("flowcell")) {
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
      c.error(*n, fmt::format("flowcell {} in [scheduler] must be 0 (off) or a power of two "
                              "from 4KiB to 16MiB",
                              *bytes));
    else
      k.flowcell = *bytes;
  }
  enum class Placement { Flowlets, Cells, Bursts };
  if (auto v = c.choice<Placement>(*t, "placement", s, false,
                                   {{"flowlets", Placement::Flowlets},
                                    {"cells", Placement::Cells},
                                    {"bursts", Placement::Bursts}})) {
    const toml::node* n = t->get("placement");
    k.burst_placement = *v == Placement::Bursts;
    // a burst ends at an idle gap: a TCP flow paced by a 250 Mbit rail
    // pauses for a 64 KiB segment's 2 ms within one, so the flowlets' gap
    // (500 us) would cut bursts short
    if (!t->get("flowlet_gap"))
      k.flowlet_gap = k.burst_placement ? kDefaultBurstGap : kDefaultFlowletGap;
    if (*v == Placement::Bursts) {
      if (k.flowcell != 0)
        c.error(*n,
                "placement = \"bursts\" in [scheduler] places whole bursts: remove flowcell "
                "(the cell size of placement = \"cells\")");
    } else if (*v == Placement::Cells) {
      if (k.flowcell == 0) k.flowcell = kDefaultFlowcell;
    } else if (k.flowcell != 0) {
      c.error(*n,
              "placement = \"flowlets\" in [scheduler] does not use flowcell: remove it, "
              "or say placement = \"cells\"");
    }
  }
  if (!t->get("placement") && k.flowcell != 0) {
    // a flowcell alone means cells
    k.burst_placement = false;
    if (!t->get("flowlet_gap")) k.flowlet_gap = kDefaultFlowletGap;
  }
  if (auto v = c.choice<bool>(*t, "flowcell_order", s, false, {{"keep", false}, {"any", true}}))
    k.flowcell_any_order = *v;
  if (k.dead_zone > k.latency_tolerance)
    c.error(where(*t, "dead_zone"),
            fmt::format("dead_zone {} is larger than latency_tolerance {}: no move could ever "
                        "happen",
                        format_duration(k.dead_zone), format_duration(k.latency_tolerance)));
}

void parse_health(Checker& c, const toml::table& root, Policy& p) {
  auto* t = root.get_as<toml::table>("health");
  if (!t) return;
  const char* s = "[health]";
  c.only_keys(
      *t, {"bfd", "interval", "multiplier", "holddown", "ramp", "ramp_interval", "suspect_moves"},
      s);
  auto& h = p.health;
  if (const toml::node* n = t->get("bfd")) {
    if (auto b = n->as_boolean())
      h.bfd = b->get();
    else
      c.error(*n, "bfd in [health] must be true or false");
  }
  if (auto v =
          c.duration(*t, "interval", s, std::chrono::milliseconds(10), std::chrono::seconds(60)))
    h.interval = *v;
  if (auto v = c.integer(*t, "multiplier", s, false, 1, 255)) h.multiplier = static_cast<int>(*v);
  if (auto v = c.duration(*t, "holddown", s, std::chrono::nanoseconds(0))) h.holddown = *v;
  if (auto v = c.duration(*t, "ramp_interval", s, std::chrono::nanoseconds(0)))
    h.ramp_interval = *v;
  if (auto v = c.choice<bool>(*t, "suspect_moves", s, false,
                              {{"all", true}, {"latency_sensitive", false}}))
    h.suspect_moves_elastic = *v;
  if (const toml::node* n = t->get("ramp")) {
    auto* arr = n->as_array();
    std::vector<int> ramp;
    bool good = arr && !arr->empty();
    if (arr) {
      for (auto& e : *arr) {
        auto i = e.as_integer();
        if (!i || i->get() < 1 || i->get() > 100 || (!ramp.empty() && i->get() <= ramp.back())) {
          good = false;
          break;
        }
        ramp.push_back(static_cast<int>(i->get()));
      }
    }
    if (!good || ramp.back() != 100)
      c.error(*n,
              "ramp in [health] must be increasing percentages ending at 100, e.g. "
              "[10, 25, 50, 100]");
    else
      h.ramp = ramp;
  }
}

void parse_measurement(Checker& c, const toml::table& root, Policy& p) {
  if (auto* t = root.get_as<toml::table>("measurement")) {
    const char* s = "[measurement]";
    c.only_keys(*t, {"cgroup", "window", "rdma_sysfs"}, s);
    if (auto v = c.string(*t, "cgroup", s, false)) {
      if (!v->empty() && v->front() != '/')
        c.error(where(*t, "cgroup"), "cgroup in [measurement] must be an absolute path");
      else
        p.measurement.cgroup = *v;
    }
    if (auto v = c.duration(*t, "window", s, std::chrono::milliseconds(100)))
      p.measurement.window = *v;
    if (auto v = c.string(*t, "rdma_sysfs", s, false)) {
      if (v->empty() || v->front() != '/')
        c.error(where(*t, "rdma_sysfs"), "rdma_sysfs in [measurement] must be an absolute path");
      else
        p.measurement.rdma_sysfs = *v;
    }
  }
  if (auto* t = root.get_as<toml::table>("metrics")) {
    c.only_keys(*t, {"listen"}, "[metrics]");
    if (auto v = c.string(*t, "listen", "[metrics]", false)) {
      if (!v->empty() && !valid_listen(*v))
        c.error(where(*t, "listen"),
                fmt::format("listen \"{}\" in [metrics] must be ADDRESS:PORT, e.g. "
                            "\"127.0.0.1:9464\" or \"[::1]:9464\", or \"\" to disable",
                            *v));
      else
        p.metrics.listen = *v;
    }
  }
}

void parse_responder(Checker& c, const toml::table& root, Policy& p) {
  auto* t = root.get_as<toml::table>("responder");
  if (!t) return;
  const char* s = "[responder]";
  c.only_keys(*t, {"enable", "port", "max_sessions", "max_duration", "allow"}, s);
  auto& r = p.responder;
  if (const toml::node* n = t->get("enable")) {
    if (auto b = n->as_boolean())
      r.enable = b->get();
    else
      c.error(*n, "enable in [responder] must be true or false");
  }
  if (auto v = c.integer(*t, "port", s, false, 1, 65535)) r.port = static_cast<uint16_t>(*v);
  if (auto v = c.integer(*t, "max_sessions", s, false, 1, 64))
    r.max_sessions = static_cast<int>(*v);
  if (auto v = c.duration(*t, "max_duration", s, std::chrono::milliseconds(100),
                          std::chrono::seconds(60)))
    r.max_duration = *v;
  if (const toml::node* n = t->get("allow")) {
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
}

// The responder's ports (one per rail, and one more per rail for MPTCP while
// a class is multipath) must be free of class ports: a probe must not be
// classified, or it would be steered off the rail it measures.
void check_responder(Checker& c, const toml::table& root, const Policy& p) {
  auto* t = root.get_as<toml::table>("responder");
  if (!p.responder.enable || p.paths.empty()) return;
  size_t first = p.responder.port, last = first + responder_ports(p) - 1;
  const toml::node* at = t && t->get("port") ? t->get("port") : nullptr;
  auto fail = [&](std::string msg) {
    if (at)
      c.error(*at, std::move(msg));
    else
      c.error(root.source(), std::move(msg));
  };
  if (last > 65535) {
    fail(
        fmt::format("port {} in [responder]: the responder takes one port per rail{}, {} to {}, "
                    "beyond 65535",
                    first, responder_ports(p) > p.paths.size() ? " and one per rail for MPTCP" : "",
                    first, last));
    return;
  }
  for (const auto& k : p.classes)
    for (const auto& r : k.ports)
      if (r.proto == Proto::Tcp && r.lo <= last && r.hi >= first)
        fail(
            fmt::format("the responder's ports {}-{} (from [responder] port) overlap "
                        "{} of class \"{}\"; move one, or set enable = false in [responder]",
                        first, last, r.str(), k.name));
}

void parse_paths(Checker& c, const toml::table& root, Policy& p) {
  const toml::node* n = root.get("path");
  if (!n) {
    if (!c.refused_like("path"))
      c.error(root.source(), "the policy has no [[path]] sections: a node needs at least one rail");
    return;
  }
  auto* arr = n->as_array();
  if (!arr || !arr->is_array_of_tables()) {
    c.error(*n, "\"path\" must be written as [[path]] sections");
    return;
  }
  if (arr->size() > DP_MAX_RAILS)
    c.error(*n,
            fmt::format("{} paths are given; at most {} are supported", arr->size(), DP_MAX_RAILS));
  std::set<std::string> names, ifaces;
  std::set<uint32_t> tables, marks;
  for (auto& e : *arr) {
    auto& t = *e.as_table();
    PathSpec ps;
    std::string section = "[[path]]";
    c.only_keys(t,
                {"name", "interface", "gateway", "gateway6", "source", "source6", "capacity",
                 "table", "fwmark", "routes", "bfd_peer"},
                section);
    if (auto v = c.string(t, "name", section, true)) {
      ps.name = *v;
      section = fmt::format("path \"{}\"", *v);
      if (!valid_name(*v))
        c.error(
            where(t, "name"),
            fmt::format("path name \"{}\" must be 1-31 characters of a-z, 0-9, '-' or '_'", *v));
      else if (!names.insert(*v).second)
        c.error(where(t, "name"), fmt::format("duplicate path name \"{}\"", *v));
    }
    if (auto v = c.string(t, "interface", section, true)) {
      ps.interface = *v;
      if (std::string why = interface_name_problem(*v); !why.empty())
        c.error(where(t, "interface"),
                fmt::format("interface \"{}\" of {} is not a valid interface name: {}",
                            printable(*v), section, why));
      else if (!ifaces.insert(*v).second)
        c.error(where(t, "interface"),
                fmt::format("interface \"{}\" is used by more than one path", *v));
    }
    ps.gateway = c.address(t, "gateway", section, AF_INET);
    ps.gateway6 = c.address(t, "gateway6", section, AF_INET6);
    ps.source = c.address(t, "source", section, AF_INET);
    ps.source6 = c.address(t, "source6", section, AF_INET6);
    ps.bfd_peer = c.address(t, "bfd_peer", section, 0);
    if (auto v = c.string(t, "capacity", section, true)) {
      auto bw = parse_bandwidth(*v);
      if (!bw)
        c.error(where(t, "capacity"),
                fmt::format("capacity of {}: {}", section, bw.error().message));
      else
        ps.capacity_bps = *bw;
    }
    if (auto v = c.integer(t, "table", section, true, 1, 0xFFFFFFFFll)) {
      ps.table = static_cast<uint32_t>(*v);
      if (ps.table >= 253 && ps.table <= 255)
        c.error(where(t, "table"),
                fmt::format("table {} of {} is one of the kernel's own (default 253, main 254, "
                            "local 255): pick another",
                            ps.table, section));
      else if (!tables.insert(ps.table).second)
        c.error(where(t, "table"),
                fmt::format("routing table {} is used by more than one path", ps.table));
    }
    if (auto v = c.integer(t, "fwmark", section, true, 1, 0xFFFFFFFFll)) {
      ps.fwmark = static_cast<uint32_t>(*v);
      if (ps.fwmark & p.routing.redirect_mark)
        c.error(where(t, "fwmark"),
                fmt::format("fwmark {:#x} of {} uses bit {:#x}, which dualpath reserves for "
                            "redirected packets ([routing] redirect_mark)",
                            ps.fwmark, section, p.routing.redirect_mark));
      else if (ps.fwmark & ~p.routing.mark_mask)
        c.error(where(t, "fwmark"),
                fmt::format("fwmark {:#x} of {} has bits outside [routing] mark_mask {:#x}, "
                            "which belong to others",
                            ps.fwmark, section, p.routing.mark_mask));
      else if (!marks.insert(ps.fwmark).second)
        c.error(where(t, "fwmark"),
                fmt::format("fwmark {:#x} is used by more than one path", ps.fwmark));
    }
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
    if (!t.get("gateway") && !t.get("gateway6"))
      c.error(t, fmt::format("{} has neither gateway nor gateway6: traffic steered onto it needs "
                             "a next hop",
                             section));
    else if (const toml::node* r = t.get("routes"); r && r->is_array())
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

// A class's QoS on the wire: dscp (a number or a name) and skb_priority (a
// band or a tc class id).
void parse_class_qos(Checker& c, const toml::table& t, const std::string& section, ClassSpec& cs) {
  if (auto d = parse_dscp_key(c, t, "dscp", section)) cs.dscp = *d;
  if (auto v = parse_skb_priority_key(c, t, "skb_priority", section)) cs.skb_priority = *v;
}

// [qos]: the pure ACKs' dscp and skb_priority, for every class.
void parse_qos(Checker& c, const toml::table& root, Policy& p) {
  const toml::node* n = root.get("qos");
  if (!n) return;
  auto* t = n->as_table();
  if (!t) {
    c.error(*n, "qos must be a [qos] section");
    return;
  }
  const std::string s = "[qos]";
  c.only_keys(*t, {"ack_dscp", "ack_skb_priority"}, s.c_str());
  p.qos.ack_dscp = parse_dscp_key(c, *t, "ack_dscp", s);
  p.qos.ack_skb_priority = parse_skb_priority_key(c, *t, "ack_skb_priority", s);
}

// [nccl]: traffic_class.N = "CLASS" and operation.OP = "CLASS", each naming
// a class of this policy (after parse_classes).
void parse_nccl(Checker& c, const toml::table& root, Policy& p) {
  const toml::node* n = root.get("nccl");
  if (!n) return;
  auto* t = n->as_table();
  if (!t) {
    c.error(*n, "nccl must be a [nccl] section");
    return;
  }
  c.only_keys(*t, {"traffic_class", "operation"}, "[nccl]");
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

// A class's TCP settings: its minimum RTO, and whether it is multipath.
void parse_class_tcp(Checker& c, const toml::table& t, const std::string& section, ClassSpec& cs) {
  if (cs.kind == ClassKind::LatencySensitive) cs.rto_min = kDefaultLatencyRtoMin;
  if (t.get("rto_min")) {
    if (auto v = c.duration(t, "rto_min", section, std::chrono::nanoseconds(0),
                            std::chrono::milliseconds(200),
                            ": the kernel's own minimum is 200ms, which a class can only lower")) {
      if (v->count() != 0 && *v < std::chrono::milliseconds(1))
        c.error(where(t, "rto_min"),
                fmt::format("rto_min of {} must be 0 (the kernel's) or at least 1ms", section));
      else
        cs.rto_min = *v;
    }
  }
  if (t.get("rto_max")) {
    if (auto v = c.duration(t, "rto_max", section, std::chrono::nanoseconds(0),
                            std::chrono::seconds(120),
                            ": the kernel's own maximum is 120s, which a class can only lower")) {
      if (v->count() != 0 && *v < std::chrono::seconds(1))
        c.error(where(t, "rto_max"),
                fmt::format("rto_max of {} must be 0 (the kernel's) or at least 1s (the "
                            "kernel's floor for TCP_RTO_MAX_MS)",
                            section));
      else
        cs.rto_max = *v;
    }
  }
  if (auto v = c.boolean(t, "multipath", section)) cs.multipath = *v;
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
void parse_class_mark(Checker& c, const toml::table& t, const std::string& section, const Policy& p,
                      std::map<uint32_t, std::string>& marks, ClassSpec& cs) {
  if (auto v = c.integer(t, "mark", section, false, 1, 0xFFFFFFFFll)) {
    auto m = static_cast<uint32_t>(*v);
    if (m & p.routing.redirect_mark)
      c.error(where(t, "mark"),
              fmt::format("mark {:#x} of {} uses bit {:#x}, which dualpath reserves for "
                          "redirected packets ([routing] redirect_mark)",
                          m, section, p.routing.redirect_mark));
    else if (m & ~p.routing.mark_mask)
      c.error(where(t, "mark"),
              fmt::format("mark {:#x} of {} has bits outside [routing] mark_mask {:#x}, which "
                          "belong to others",
                          m, section, p.routing.mark_mask));
    else if (marks.count(m))
      c.error(where(t, "mark"), fmt::format("mark {:#x} of {} is already the mark of class \"{}\"",
                                            m, section, marks[m]));
    else if (std::any_of(p.paths.begin(), p.paths.end(),
                         [m](const PathSpec& ps) { return ps.fwmark == m; }))
      c.error(where(t, "mark"),
              fmt::format("mark {:#x} of {} is a path's fwmark; class marks and path fwmarks "
                          "must differ",
                          m, section));
    else
      marks[m] = cs.name;
    cs.mark = m;
  }
}

// The path a class prefers, which the policy must define.
void parse_class_prefer(Checker& c, const toml::table& t, const std::string& section,
                        const Policy& p, ClassSpec& cs) {
  if (auto v = c.string(t, "prefer", section, true)) {
    cs.prefer = *v;
    if (!p.path(*v)) {
      std::vector<std::string> paths;
      for (const auto& ps : p.paths) paths.push_back(ps.name);
      auto near = nearest_name(*v, paths);
      c.error(where(t, "prefer"),
              fmt::format(
                  "{} prefers path \"{}\", which the policy does not define{} (paths: "
                  "{})",
                  section, *v, near ? fmt::format("; did you mean \"{}\"?", *near) : "",
                  paths.empty() ? std::string("none") : fmt::format("{}", fmt::join(paths, ", "))));
    }
  }
}

void parse_classes(Checker& c, const toml::table& root, Policy& p) {
  const toml::node* n = root.get("class");
  if (!n) {
    if (!c.refused_like("class")) c.error(root.source(), "the policy has no [[class]] sections");
    return;
  }
  auto* arr = n->as_array();
  if (!arr || !arr->is_array_of_tables()) {
    c.error(*n, "\"class\" must be written as [[class]] sections");
    return;
  }
  if (arr->size() > DP_MAX_CLASSES - 1)
    c.error(*n, fmt::format("{} classes are given; at most {} are supported", arr->size(),
                            DP_MAX_CLASSES - 1));
  std::set<std::string> names;
  std::map<uint32_t, std::string> marks;
  std::map<std::string, std::string> cgroup_owner;  // rule -> class
  for (auto& e : *arr) {
    auto& t = *e.as_table();
    ClassSpec cs;
    std::string section = "[[class]]";
    c.only_keys(t,
                {"name", "kind", "priority", "prefer", "mark", "ports", "cgroups", "units", "match",
                 "pinned", "dscp", "skb_priority", "rto_min", "rto_max", "multipath", "reserve"},
                section);
    if (auto v = c.string(t, "name", section, true)) {
      cs.name = *v;
      section = fmt::format("class \"{}\"", *v);
      if (!valid_name(*v))
        c.error(
            where(t, "name"),
            fmt::format("class name \"{}\" must be 1-31 characters of a-z, 0-9, '-' or '_'", *v));
      else if (!names.insert(*v).second)
        c.error(where(t, "name"), fmt::format("duplicate class name \"{}\"", *v));
    }
    if (auto v = c.choice<ClassKind>(
            t, "kind", section, true,
            {{"latency_sensitive", ClassKind::LatencySensitive}, {"elastic", ClassKind::Elastic}}))
      cs.kind = *v;
    if (auto v = c.integer(t, "priority", section, false, 0, 7)) cs.priority = static_cast<int>(*v);
    parse_class_prefer(c, t, section, p, cs);
    parse_class_qos(c, t, section, cs);
    parse_class_mark(c, t, section, p, marks, cs);
    if (auto v = c.choice<PortMatch>(
            t, "match", section, false,
            {{"any", PortMatch::Any}, {"src", PortMatch::Src}, {"dst", PortMatch::Dst}}))
      cs.match = *v;
    if (auto v = c.boolean(t, "pinned", section)) cs.pinned = *v;
    if (const toml::node* pn = t.get("ports")) {
      auto* pa = pn->as_array();
      if (!pa) {
        c.error(*pn,
                fmt::format("ports of {} must be an array like [\"tcp:50000-50999\"]", section));
      } else {
        for (auto& pe : *pa)
          if (auto r = parse_port_range(c, pe, cs.name)) cs.ports.push_back(*r);
      }
    }
    parse_cgroups(c, t, section, cs, cgroup_owner);
    parse_class_tcp(c, t, section, cs);
    parse_class_reserve(c, t, section, cs);
    size_t rules_written = 0;  // a rule written wrong has its own error already
    for (auto key : {"ports", "cgroups", "units"})
      if (const toml::node* rn = t.get(key))
        rules_written += rn->as_array() ? rn->as_array()->size() : 1;
    if (!cs.mark && !t.get("mark") && rules_written == 0)
      c.error(t.get("ports") ? *t.get("ports") : static_cast<const toml::node&>(t),
              fmt::format("{} has no ports, mark, cgroups or units: no traffic could ever match it",
                          section));
    p.classes.push_back(std::move(cs));
  }

  check_port_overlaps(c, p);
  check_reserves(c, root, p);
  check_multipath(c, root, p);

  if (p.default_class && !p.klass(*p.default_class)) {
    auto* t = root.get_as<toml::table>("node");
    c.error(t ? where(*t, "default_class") : static_cast<const toml::node&>(root),
            fmt::format("default_class \"{}\" is not a class of this policy", *p.default_class));
  }
}

// [[peer]]: name (optional), addresses = { PATH = "ADDR" | ["ADDR4", "ADDR6"] }.
void parse_peers(Checker& c, const toml::table& root, Policy& p) {
  const toml::node* n = root.get("peer");
  if (!n) return;
  auto* arr = n->as_array();
  if (!arr || !arr->is_array_of_tables()) {
    c.error(*n, "\"peer\" must be written as [[peer]] sections");
    return;
  }
  if (p.topology != Topology::Separate) {
    c.error(*n,
            "[[peer]] is for the separate topology, where a connection is placed on a rail by "
            "its peer's address there; in the shared topology a peer has one address on every "
            "rail");
    return;
  }
  std::vector<std::string> paths;
  for (auto& ps : p.paths) paths.push_back(ps.name);
  std::map<std::string, std::string> seen;  // address -> the peer that has it
  for (auto& e : *arr) {
    auto& t = *e.as_table();
    PeerSpec pe;
    pe.line = static_cast<int>(t.source().begin.line);
    pe.addr4.resize(p.paths.size());
    pe.addr6.resize(p.paths.size());
    c.only_keys(t, {"name", "addresses"}, "[[peer]]");
    if (auto v = c.string(t, "name", "[[peer]]", false)) pe.name = *v;
    std::string section = pe.name.empty() ? "[[peer]]" : fmt::format("peer \"{}\"", pe.name);
    auto* at = t.get("addresses");
    auto* addrs = at ? at->as_table() : nullptr;
    if (!addrs) {
      c.error(at ? *at : static_cast<const toml::node&>(t),
              fmt::format("{} needs addresses = {{ PATH = \"ADDRESS\", ... }}, its address on "
                          "each path (a list for IPv4 and IPv6)",
                          section));
      continue;
    }
    size_t given = 0;
    for (auto& [k, v] : *addrs) {
      int idx = p.path_index(std::string(k.str()));
      if (idx < 0) {
        auto near = nearest_name(k.str(), paths);
        c.error(v, fmt::format("{}: no path \"{}\" in the policy{}", section, k.str(),
                               near ? fmt::format("; did you mean \"{}\"?", *near) : ""));
        continue;
      }
      std::vector<const toml::node*> items;
      if (auto* a = v.as_array())
        for (auto& x : *a) items.push_back(&x);
      else
        items.push_back(&v);
      for (auto* x : items) {
        auto* str = x->as_string();
        auto a = str ? IpAddr::parse(str->get()) : std::nullopt;
        if (!a) {
          c.error(*x, fmt::format("{}: addresses.{} must be an IP address or a list of one IPv4 "
                                  "and one IPv6 address",
                                  section, k.str()));
          continue;
        }
        auto& slot = (a->family == AF_INET ? pe.addr4 : pe.addr6)[static_cast<size_t>(idx)];
        if (slot) {
          c.error(*x, fmt::format("{}: addresses.{} has two {} addresses", section, k.str(),
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
    }
    if (given && given < 2)
      c.error(t, fmt::format("{} has an address on one path only: the table moves connections "
                             "between paths, so it needs the peer's address on at least two",
                             section));
    p.peers.push_back(std::move(pe));
  }
}

}  // namespace

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
  Checker c(name);
  Policy p;
  p.file = name;
  p.hash = content_hash(text);
  p.text = text;
  c.only_keys(root,
              {"node", "routing", "scheduler", "health", "measurement", "metrics", "responder",
               "qos", "nccl", "path", "class", "peer"},
              "the top level", {"path", "class", "peer"});
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
