// SPDX-License-Identifier: Apache-2.0
#include "settings.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdlib.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <set>

namespace dpnccl {

namespace {

std::string env(const char* name) {
  const char* v = ::getenv(name);
  return v ? v : "";
}

bool parse_int(const char* name, int lo, int hi, int* out, std::string* error) {
  std::string v = env(name);
  if (v.empty()) return true;
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (errno || end == v.c_str() || *end || x < lo || x > hi) {
    *error = std::string(name) + "=\"" + v + "\" is not a whole number from " + std::to_string(lo) +
             " to " + std::to_string(hi) + " (unset it for the default, " + std::to_string(*out) +
             ")";
    return false;
  }
  *out = static_cast<int>(x);
  return true;
}

bool parse_bool(const char* name, bool* out, std::string* error) {
  std::string v = env(name);
  if (v.empty()) return true;
  if (v == "1" || v == "yes" || v == "true") {
    *out = true;
  } else if (v == "0" || v == "no" || v == "false") {
    *out = false;
  } else {
    *error = std::string(name) + "=\"" + v + "\" is not 0 or 1";
    return false;
  }
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

bool interface_exists(const std::string& ifname) { return ::if_nametoindex(ifname.c_str()) != 0; }

}  // namespace

std::optional<uint64_t> parse_rate(const std::string& text) {
  std::string t;
  for (char c : text) t.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  double v = std::strtod(t.substr(0, i).c_str(), nullptr);
  std::string unit = t.substr(i);
  if (unit.size() > 3 && unit.compare(unit.size() - 3, 3, "bit") == 0)
    unit = unit.substr(0, unit.size() - 3);
  double mult = 1;
  if (unit == "k") {
    mult = 1e3;
  } else if (unit == "m") {
    mult = 1e6;
  } else if (unit == "g") {
    mult = 1e9;
  } else if (unit == "t") {
    mult = 1e12;
  } else if (!unit.empty()) {
    return std::nullopt;
  }
  if (v <= 0) return std::nullopt;
  return static_cast<uint64_t>(v * mult);
}

bool load_settings(Settings* s, std::string* error) {
  if (std::string v = env("NCCL_DUALPATH_SOCKET"); !v.empty()) s->socket = v;
  s->klass = env("NCCL_DUALPATH_CLASS");
  s->rails_env = env("NCCL_DUALPATH_RAILS");
  int chunk_kib = static_cast<int>(s->chunk_bytes >> 10);
  int window_kib = static_cast<int>(s->window_bytes >> 10);
  if (!parse_int("NCCL_DUALPATH_STALL_MS", 10, 600000, &s->stall_ms, error) ||
      !parse_int("NCCL_DUALPATH_TIMEOUT_MS", 100, 3600000, &s->timeout_ms, error) ||
      !parse_int("NCCL_DUALPATH_REOPEN_MS", 10, 600000, &s->reopen_ms, error) ||
      !parse_int("NCCL_DUALPATH_RTO_MIN_MS", 0, 1000, &s->rto_min_ms, error) ||
      !parse_int("NCCL_DUALPATH_LOSS_PCT", 0, 100, &s->loss_pct, error) ||
      !parse_int("NCCL_DUALPATH_STREAMS", 0, 16, &s->streams_per_rail, error) ||
      !parse_int("NCCL_DUALPATH_CHUNK_KIB", 4, 16384, &chunk_kib, error) ||
      !parse_int("NCCL_DUALPATH_WINDOW_KIB", 64, 262144, &window_kib, error) ||
      !parse_bool("NCCL_DUALPATH_SPREAD", &s->spread, error) ||
      !parse_bool("NCCL_DUALPATH_DAEMON", &s->use_daemon, error))
    return false;
  s->chunk_bytes = static_cast<uint32_t>(chunk_kib) << 10;
  s->window_bytes = static_cast<uint64_t>(window_kib) << 10;
  if (s->window_bytes < s->chunk_bytes) s->window_bytes = s->chunk_bytes;
  if (std::string f = env("NCCL_DUALPATH_FAULT"); !f.empty()) {
    auto colon = f.find(':');
    char* end = nullptr;
    const std::string head = colon == std::string::npos ? std::string() : f.substr(0, colon);
    long rail = colon == std::string::npos ? -1 : std::strtol(head.c_str(), &end, 10);
    unsigned long long after =
        colon == std::string::npos ? 0 : std::strtoull(f.c_str() + colon + 1, nullptr, 10);
    if (rail < 0 || rail > 7 || !end || *end) {
      *error = "NCCL_DUALPATH_FAULT=\"" + f + "\" is not RAIL:BYTES (a testing aid)";
      return false;
    }
    s->fault_rail = static_cast<int>(rail);
    s->fault_after = after;
  }
  return true;
}

bool parse_address(const std::string& text, sockaddr_storage* addr, socklen_t* len) {
  *addr = {};
  auto* a4 = reinterpret_cast<sockaddr_in*>(addr);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(addr);
  if (::inet_pton(AF_INET, text.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    *len = sizeof(sockaddr_in);
    return true;
  }
  if (::inet_pton(AF_INET6, text.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

std::string address_string(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, buf, sizeof(buf));
  else if (addr.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, buf,
                sizeof(buf));
  return buf;
}

bool interface_address(const std::string& ifname, sockaddr_storage* addr, socklen_t* len) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (int pass = 0; pass < 2 && !found; ++pass) {
    for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
      if (!i->ifa_addr || ifname != i->ifa_name) continue;
      if (pass == 0 && i->ifa_addr->sa_family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
        if ((ntohl(a->sin_addr.s_addr) >> 16) == 0xa9fe) continue;  // 169.254/16
        *addr = {};
        std::memcpy(addr, a, sizeof(sockaddr_in));
        *len = sizeof(sockaddr_in);
        found = true;
      } else if (pass == 1 && i->ifa_addr->sa_family == AF_INET6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
        if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr)) continue;
        *addr = {};
        std::memcpy(addr, a, sizeof(sockaddr_in6));
        *len = sizeof(sockaddr_in6);
        found = true;
      }
    }
  }
  ::freeifaddrs(list);
  return found;
}

void fill_sysfs(Rail* r) {
  std::string dev = "/sys/class/net/" + r->ifname + "/device";
  if (char* real = ::realpath(dev.c_str(), nullptr)) {
    r->pci_path = real;
    ::free(real);
  }
  // the MAC address as the NIC's identity; loopback and tunnels have none
  std::ifstream in("/sys/class/net/" + r->ifname + "/address");
  std::string mac;
  uint64_t g = 0;
  if (in >> mac)
    for (char c : mac)
      if (std::isxdigit(static_cast<unsigned char>(c)))
        g = (g << 4) | static_cast<uint64_t>(std::stoi(std::string(1, c), nullptr, 16));
  // distinct per rail even where the MAC is all zero (lo) or shared
  g ^= std::hash<std::string>{}(r->name) & 0xffff000000000000ULL;
  r->guid = g ? g : std::hash<std::string>{}(r->name);
  if (!r->capacity_bps) {
    std::ifstream sp("/sys/class/net/" + r->ifname + "/speed");
    long mbps = 0;
    if (sp >> mbps && mbps > 0) r->capacity_bps = static_cast<uint64_t>(mbps) * 1000000ULL;
  }
}

bool rails_from_env(const Settings& s, std::vector<Rail>* rails, std::string* error) {
  rails->clear();
  std::vector<std::string> items;
  const char* var = "NCCL_DUALPATH_RAILS";
  if (!s.rails_env.empty()) {
    items = split(s.rails_env, ',');
  } else {
    var = "NCCL_SOCKET_IFNAME";
    std::string v = env(var);
    if (!v.empty() && v[0] == '=') v = v.substr(1);
    if (!v.empty() && v[0] != '^')
      for (auto& i : split(v, ',')) items.push_back(i);
  }
  if (items.empty()) {
    *error =
        "no rails: set NCCL_DUALPATH_RAILS=IF[=ADDR][@RATE],... or NCCL_SOCKET_IFNAME, or run "
        "dualpathd";
    return false;
  }
  std::set<std::string> names;
  for (const auto& item : items) {
    Rail r;
    std::string spec = item, rate;
    if (auto at = spec.find('@'); at != std::string::npos) {
      rate = spec.substr(at + 1);
      spec = spec.substr(0, at);
    }
    std::string addr;
    if (auto eq = spec.find('='); eq != std::string::npos) {
      addr = spec.substr(eq + 1);
      spec = spec.substr(0, eq);
    }
    r.ifname = spec;
    if (!interface_exists(r.ifname)) {
      *error = std::string(var) + ": no interface named \"" + r.ifname + "\" (in \"" + item +
               "\"; `ip link` lists them)";
      return false;
    }
    if (!rate.empty()) {
      auto bps = parse_rate(rate);
      if (!bps) {
        *error = std::string(var) + ": \"" + rate + "\" is not a rate (like 1Gbit or 250Mbit)";
        return false;
      }
      r.capacity_bps = *bps;
    }
    if (!addr.empty()) {
      if (!parse_address(addr, &r.addr, &r.addrlen)) {
        *error = std::string(var) + ": \"" + addr + "\" is not an IPv4 or IPv6 address";
        return false;
      }
    } else if (!interface_address(r.ifname, &r.addr, &r.addrlen)) {
      *error = std::string(var) + ": interface " + r.ifname + " has no usable address";
      return false;
    }
    r.name = r.ifname;
    if (names.count(r.name)) r.name = r.ifname + ":" + address_string(r.addr);
    names.insert(r.name);
    fill_sysfs(&r);
    rails->push_back(std::move(r));
  }
  if (rails->size() > 4) {
    *error = std::string(var) + ": at most 4 rails";
    return false;
  }
  return true;
}

}  // namespace dpnccl
