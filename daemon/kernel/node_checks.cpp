// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/node_checks.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "dualpath/core/result.h"
#include "dualpath/kernel/procfs.h"
#include "dualpath/kernel/routing.h"

namespace dp {

namespace {

int read_int(const std::string& file, int fallback) {
  std::ifstream in(file);
  int v = fallback;
  in >> v;
  return v;
}

// Local addresses, by interface name.
std::vector<std::pair<std::string, IpAddr>> local_addresses() {
  std::vector<std::pair<std::string, IpAddr>> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr) continue;
    IpAddr ip;
    if (a->ifa_addr->sa_family == AF_INET) {
      ip.family = AF_INET;
      std::memcpy(ip.bytes.data(), &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      ip.family = AF_INET6;
      std::memcpy(ip.bytes.data(), &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
    } else {
      continue;
    }
    out.push_back({a->ifa_name, ip});
  }
  freeifaddrs(list);
  return out;
}

// The IPv4 neighbour entry of addr on dev, from /proc/net/arp ("" if none).
std::string arp_state(const IpAddr& addr, const std::string& dev) {
  std::ifstream in("/proc/net/arp");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string ip, hw, flags, mac, mask, iface;
    ss >> ip >> hw >> flags >> mac >> mask >> iface;
    if (ip == addr.str() && iface == dev) return flags == "0x0" ? "incomplete" : "resolved";
  }
  return "";
}

}  // namespace

std::optional<std::pair<int, int>> kernel_version(const std::string& release) {
  int major = 0, minor = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &major, &minor) != 2) return std::nullopt;
  return std::pair{major, minor};
}

std::string kernel_problem(const std::string& release, bool has_btf) {
  auto version = kernel_version(release);
  if (!version) return fmt::format("cannot read the kernel's version from \"{}\"", release);
  auto [major, minor] = *version;
  if (major < 5 || (major == 5 && minor < 18))
    return fmt::format(
        "this kernel is {}; dualpathd needs Linux 5.18 or later (Debian 12's 6.1, "
        "Ubuntu 24.04's 6.8 and later are fine)",
        release);
  if (!has_btf)
    return fmt::format(
        "this kernel ({}) has no BTF (/sys/kernel/btf/vmlinux): dualpathd needs a "
        "kernel built with CONFIG_DEBUG_INFO_BTF=y, as Debian's and Ubuntu's are",
        release);
  return "";
}

std::string running_kernel_problem() {
  utsname u{};
  if (::uname(&u) != 0) return "uname() failed";
  return kernel_problem(u.release, ::access("/sys/kernel/btf/vmlinux", R_OK) == 0);
}

bool running_kernel_at_least(int major, int minor) {
  utsname u{};
  if (::uname(&u) != 0) return false;
  auto version = kernel_version(u.release);
  return version && *version >= std::pair{major, minor};
}

std::vector<NodeCheck> check_node(const Policy& p) {
  std::vector<NodeCheck> out;
  auto locals = local_addresses();
  int rp_all = read_int("/proc/sys/net/ipv4/conf/all/rp_filter", 0);
  for (const auto& ps : p.paths) {
    // Reverse-path filtering: the kernel uses the larger of "all" and the interface's.
    int rp =
        std::max(rp_all, read_int("/proc/sys/net/ipv4/conf/" + ps.interface + "/rp_filter", 0));
    NodeCheck rc{ps.name, "rp_filter", true, ""};
    if (p.topology == Topology::Shared && rp == 1) {
      rc.ok = false;
      rc.detail = fmt::format(
          "rp_filter is strict (1) on {}: packets of flows steered onto it come from addresses "
          "routed over the other rail and are dropped; set net.ipv4.conf.{}.rp_filter=2 (loose) "
          "and net.ipv4.conf.all.rp_filter to at most 2",
          ps.interface, sysctl_ifname(ps.interface));
    } else {
      rc.detail = fmt::format("{} ({})", rp, rp == 0 ? "off" : rp == 1 ? "strict" : "loose");
    }
    out.push_back(rc);
    for (const auto& src : {ps.source, ps.source6}) {
      if (!src) continue;
      bool on_rail = false, anywhere = false;
      for (auto& [dev, ip] : locals)
        if (ip == *src) {
          anywhere = true;
          on_rail = on_rail || dev == ps.interface;
        }
      NodeCheck ac{ps.name, "address", true, ""};
      if (p.topology == Topology::Separate && !on_rail) {
        ac.ok = false;
        ac.detail = fmt::format(
            "source {} is not on {}: in the separate topology each rail's source address is its "
            "own network's, on its own interface",
            src->str(), ps.interface);
      } else if (!anywhere) {
        ac.ok = false;
        ac.detail = fmt::format("source {} is not an address of this node", src->str());
      } else {
        ac.detail =
            fmt::format("source {} present{}", src->str(), on_rail ? " on " + ps.interface : "");
      }
      out.push_back(ac);
    }
    if (ps.gateway) {
      std::string st = arp_state(*ps.gateway, ps.interface);
      out.push_back({ps.name, "neighbour", st != "incomplete",
                     fmt::format("gateway {} on {}: {}", ps.gateway->str(), ps.interface,
                                 st.empty() ? "no entry yet (resolved on first use)" : st)});
    }
    if (ps.gateway6) {
      auto st = Routing::neighbour_state(*ps.gateway6, ps.interface);
      std::string s = st ? *st : "cannot read the neighbour table: " + st.error().what();
      bool bad = s == "incomplete" || s == "failed";
      out.push_back(
          {ps.name, "neighbour", !bad,
           fmt::format("gateway {} on {}: {}{}", ps.gateway6->str(), ps.interface,
                       s.empty() ? "no entry yet (resolved on first use)" : s,
                       bad ? fmt::format(" (is {} up, and is an address of its network on {}? "
                                         "`ip -6 neigh show dev {}`)",
                                         ps.gateway6->str(), ps.interface, ps.interface)
                           : "")});
    }
  }
  return out;
}

int interface_mtu(const std::string& ifname) {
  Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  if (!s.valid() || ::ioctl(s.get(), SIOCGIFMTU, &ifr) != 0) return 0;
  return ifr.ifr_mtu;
}

json to_json(const std::vector<NodeCheck>& checks) {
  json out = json::array();
  for (const auto& c : checks)
    out.push_back({{"path", c.path}, {"check", c.what}, {"ok", c.ok}, {"detail", c.detail}});
  return out;
}

}  // namespace dp
