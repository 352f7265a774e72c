// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/routing.h"

#include <linux/fib_rules.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netlink/netlink.h>
#include <netlink/route/neighbour.h>
#include <netlink/route/route.h>
#include <netlink/route/rule.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <set>

#include "dualpath/kernel/netlink.h"
#include "dualpath/kernel/procfs.h"

namespace dp {
namespace {

// The interface is administratively up (IFF_UP); unknown ones count as up,
// so that adding their routes reports the kernel's own error.
bool link_is_up(int ifindex) {
  char name[IF_NAMESIZE] = {};
  if (!if_indextoname(static_cast<unsigned>(ifindex), name)) return true;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name, sizeof(ifr.ifr_name) - 1);
  bool up = ::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0 || (ifr.ifr_flags & IFF_UP);
  ::close(fd);
  return up;
}

constexpr uint32_t kRuleRange = 100;
// Failover rules ("to <a failed path's route> lookup <survivor's table>") use
// the upper half of the range; the fwmark rules the lower.
constexpr uint32_t kFailoverRuleOffset = 50;
// The shared topology's "oif <rail> lookup <its table>" rules, for sockets
// bound to a rail (a multipath class's subflows, one per rail), sit between.
constexpr uint32_t kOifRuleOffset = 40;

template <class T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const {
    if (p) F(p);
  }
};
using CachePtr = std::unique_ptr<nl_cache, Deleter<nl_cache, nl_cache_free>>;
using AddrPtr = std::unique_ptr<nl_addr, Deleter<nl_addr, nl_addr_put>>;
using RulePtr = std::unique_ptr<rtnl_rule, Deleter<rtnl_rule, rtnl_rule_put>>;
using RoutePtr = std::unique_ptr<rtnl_route, Deleter<rtnl_route, rtnl_route_put>>;

AddrPtr make_addr(const IpAddr& a, int prefixlen) {
  nl_addr* n = nl_addr_build(a.family, a.bytes.data(), a.family == AF_INET ? 4 : 16);
  if (n) nl_addr_set_prefixlen(n, prefixlen);
  return AddrPtr(n);
}

std::string addr_str(nl_addr* a) {
  if (!a) return "";
  char buf[128];
  return nl_addr2str(a, buf, sizeof(buf));
}

bool rule_is_ours(rtnl_rule* r, const Policy& p) {
  uint8_t proto = 0;
  uint32_t prio = rtnl_rule_get_prio(r);
  return rtnl_rule_get_protocol(r, &proto) == 0 && proto == p.routing.route_protocol &&
         prio >= p.routing.rule_priority && prio < p.routing.rule_priority + kRuleRange;
}

bool route_is_ours(rtnl_route* r, const Policy& p) {
  return rtnl_route_get_protocol(r) == p.routing.route_protocol;
}

// Identity strings, to compare what exists with what is wanted.
struct WantedRule {
  int family;
  uint32_t prio, mark, table;
  std::optional<Prefix> to;     // failover: traffic to a failed path's routes
  uint32_t mask = 0xffffffffu;  // [routing] mark_mask: others' bits do not matter
  std::string oif;              // sockets bound to this interface
};

std::string rule_key(int family, uint32_t prio, uint32_t mark, uint32_t table,
                     const std::string& to = "", uint32_t mask = 0xffffffffu,
                     const std::string& oif = "") {
  std::string sel = !oif.empty()          ? "oif " + oif
                    : !to.empty()         ? "to " + to
                    : mask == 0xffffffffu ? fmt::format("fwmark {:#x}", mark)
                                          : fmt::format("fwmark {:#x}/{:#x}", mark, mask);
  return fmt::format("rule {} pref {} {} lookup {}", family == AF_INET ? "ipv4" : "ipv6", prio, sel,
                     table);
}
std::string rule_key(const WantedRule& w) {
  return rule_key(w.family, w.prio, w.mark, w.table, w.to ? w.to->str() : "", w.mask, w.oif);
}
std::string rule_key(rtnl_rule* r) {
  std::string to;
  if (nl_addr* d = rtnl_rule_get_dst(r)) {
    char buf[128];
    nl_addr2str(d, buf, sizeof(buf));
    to = buf;
    if (to.find('/') == std::string::npos) to += fmt::format("/{}", nl_addr_get_prefixlen(d));
  }
  const char* oif = rtnl_rule_get_oif(r);
  return rule_key(rtnl_rule_get_family(r), rtnl_rule_get_prio(r),
                  to.empty() ? rtnl_rule_get_mark(r) : 0, rtnl_rule_get_table(r), to,
                  to.empty() ? rtnl_rule_get_mask(r) : 0xffffffffu, oif ? oif : "");
}

std::string route_key(uint32_t table, const std::string& dst, const std::string& gw, int ifindex,
                      const std::string& src) {
  char ifname[IF_NAMESIZE] = "?";
  if_indextoname(static_cast<unsigned>(ifindex), ifname);
  std::string s = fmt::format("route {} table {}", dst, table);
  if (!gw.empty()) s += " via " + gw;
  s += fmt::format(" dev {}", ifname);
  if (!src.empty()) s += " src " + src;
  return s;
}
std::string route_key(rtnl_route* r) {
  std::string gw;
  int ifindex = 0;
  if (rtnl_route_get_nnexthops(r) > 0) {
    rtnl_nexthop* nh = rtnl_route_nexthop_n(r, 0);
    gw = addr_str(rtnl_route_nh_get_gateway(nh));
    ifindex = rtnl_route_nh_get_ifindex(nh);
  }
  std::string dst = addr_str(rtnl_route_get_dst(r));
  if (dst == "none") dst = rtnl_route_get_family(r) == AF_INET ? "0.0.0.0/0" : "::/0";
  std::string src = addr_str(rtnl_route_get_pref_src(r));
  if (src == "none") src.clear();
  if (gw == "none") gw.clear();
  return route_key(rtnl_route_get_table(r), dst, gw, ifindex, src);
}

struct WantedRoute {
  const PathSpec* path;
  Prefix dst;
  int ifindex;
  std::optional<IpAddr> gw, src;
  std::string key;
};

// A failed path's table is not looked up (its rule points at the survivor's
// table), and its routes may not even be addable (interface down): skipped
// until it is restored.
Result<std::vector<WantedRoute>> wanted_routes(const Policy& p, const std::vector<bool>& failed) {
  std::vector<WantedRoute> out;
  bool survivor = false;
  for (size_t i = 0; i < p.paths.size(); ++i)
    survivor = survivor || i >= failed.size() || !failed[i];
  for (size_t pi = 0; pi < p.paths.size(); ++pi) {
    const auto& ps = p.paths[pi];
    if (survivor && pi < failed.size() && failed[pi]) continue;
    int ifindex = static_cast<int>(if_nametoindex(ps.interface.c_str()));
    if (!ifindex && !ps.routes.empty())
      return DP_SYS_ERROR(ENODEV, "interface {} of path {} does not exist", ps.interface, ps.name);
    for (auto& r : ps.routes) {
      WantedRoute w{&ps, r, ifindex, {}, {}, {}};
      bool v4 = r.addr.family == AF_INET;
      w.gw = v4 ? ps.gateway : ps.gateway6;
      w.src = v4 ? ps.source : ps.source6;
      std::string dst = r.str();
      if (r.len == 0)
        dst = v4 ? "0.0.0.0/0" : "::/0";
      else if ((v4 && r.len == 32) || (!v4 && r.len == 128))
        dst = r.addr.str();
      w.key = route_key(ps.table, dst, w.gw ? w.gw->str() : "", ifindex, w.src ? w.src->str() : "");
      out.push_back(std::move(w));
    }
  }
  return out;
}

std::vector<WantedRule> wanted_rules(const Policy& p, const std::vector<bool>& failed) {
  std::vector<WantedRule> out;
  // the first path that has not failed carries what the failed ones carried
  size_t survivor = p.paths.size();
  for (size_t i = 0; i < p.paths.size() && survivor == p.paths.size(); ++i)
    if (i >= failed.size() || !failed[i]) survivor = i;
  auto is_failed = [&](size_t i) {
    return survivor < p.paths.size() && i < failed.size() && failed[i];
  };
  uint32_t next_to = p.routing.rule_priority + kFailoverRuleOffset;
  for (size_t i = 0; i < p.paths.size(); ++i) {
    uint32_t table = is_failed(i) ? p.paths[survivor].table : p.paths[i].table;
    for (int fam : {AF_INET, AF_INET6})
      out.push_back({fam,
                     p.routing.rule_priority + static_cast<uint32_t>(i),
                     p.paths[i].fwmark,
                     table,
                     {},
                     p.routing.mark_mask,
                     {}});
    // A multipath class's subflow bound to this rail is routed by its
    // table (in the shared topology every rail reaches the peers' address,
    // so the bound device alone decides); a failed rail keeps its own
    // table, whose routes are gone, and the daemon removes its subflows.
    if (p.topology == Topology::Shared && p.has_multipath())
      for (int fam : {AF_INET, AF_INET6})
        out.push_back({fam,
                       p.routing.rule_priority + kOifRuleOffset + static_cast<uint32_t>(i),
                       0,
                       p.paths[i].table,
                       {},
                       0xffffffffu,
                       p.paths[i].interface});
    // In the separate topology a failed rail's networks are reached through
    // it alone: the survivor's table has no route there, so no "to" rule
    // (connections were ended and reconnect to the survivor's network).
    if (!is_failed(i) || p.topology == Topology::Separate) continue;
    for (const auto& r : p.paths[i].routes)
      if (next_to < p.routing.rule_priority + kRuleRange)
        out.push_back({r.addr.family, next_to++, 0, p.paths[survivor].table, r, 0xffffffffu, {}});
  }
  return out;
}

// Makes dualpath's ip rules those `rules` says: stale ones removed, missing
// ones added, the rest left as they are (counted in `ch`).
Result<void> apply_rules(nl_sock* sk, const Policy& p, const std::vector<WantedRule>& rules,
                         RoutingChange& ch) {
  std::set<std::string> want;
  for (auto& w : rules) want.insert(rule_key(w));
  nl_cache* raw = nullptr;
  DP_TRY(nl_result(rtnl_rule_alloc_cache(sk, AF_UNSPEC, &raw), "listing ip rules failed"));
  CachePtr rc(raw);
  std::set<std::string> have;
  for (auto* o = nl_cache_get_first(rc.get()); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_rule*>(o);
    if (!rule_is_ours(r, p)) continue;
    std::string k = rule_key(r);
    if (want.count(k) && !have.count(k)) {
      have.insert(k);
      ++ch.unchanged;
      continue;
    }
    DP_TRY(nl_result(rtnl_rule_delete(sk, r, 0), "removing stale rule \"" + k + "\" failed"));
    ++ch.removed;
  }
  for (auto& w : rules) {
    std::string k = rule_key(w);
    if (have.count(k)) continue;
    RulePtr r(rtnl_rule_alloc());
    rtnl_rule_set_family(r.get(), w.family);
    rtnl_rule_set_prio(r.get(), w.prio);
    AddrPtr to;
    if (!w.oif.empty()) {
      rtnl_rule_set_oif(r.get(), w.oif.c_str());
    } else if (w.to) {
      to = make_addr(w.to->addr, w.to->len);
      rtnl_rule_set_dst(r.get(), to.get());
    } else {
      rtnl_rule_set_mark(r.get(), w.mark);
      rtnl_rule_set_mask(r.get(), w.mask);
    }
    rtnl_rule_set_table(r.get(), w.table);
    rtnl_rule_set_action(r.get(), FR_ACT_TO_TBL);
    rtnl_rule_set_protocol(r.get(), p.routing.route_protocol);
    DP_TRY(nl_result(rtnl_rule_add(sk, r.get(), NLM_F_CREATE | NLM_F_EXCL),
                     "adding \"" + k + "\" failed"));
    ++ch.added;
  }
  return {};
}

// Adds one wanted route to its path's table. A route to the same destination
// that is not dualpath's is a conflict (`*conflict` set): the policy must
// change; any other refusal may pass (a gateway the interface cannot reach
// yet).
Result<void> add_route(nl_sock* sk, const Policy& p, const WantedRoute& w, bool* conflict) {
  RoutePtr r(rtnl_route_alloc());
  rtnl_route_set_family(r.get(), static_cast<uint8_t>(w.dst.addr.family));
  rtnl_route_set_table(r.get(), w.path->table);
  rtnl_route_set_protocol(r.get(), p.routing.route_protocol);
  AddrPtr dst = make_addr(w.dst.addr, w.dst.len);
  rtnl_route_set_dst(r.get(), dst.get());
  AddrPtr src;
  if (w.src) {
    src = make_addr(*w.src, w.src->family == AF_INET ? 32 : 128);
    rtnl_route_set_pref_src(r.get(), src.get());
  }
  rtnl_route_set_scope(r.get(), w.gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
  rtnl_nexthop* nh = rtnl_route_nh_alloc();
  rtnl_route_nh_set_ifindex(nh, w.ifindex);
  AddrPtr gw;
  if (w.gw) {
    gw = make_addr(*w.gw, w.gw->family == AF_INET ? 32 : 128);
    rtnl_route_nh_set_gateway(nh, gw.get());
  }
  rtnl_route_add_nexthop(r.get(), nh);  // the route owns nh now
  int err = rtnl_route_add(sk, r.get(), NLM_F_CREATE | NLM_F_EXCL);
  *conflict = err == -NLE_EXIST;
  if (err == -NLE_EXIST)
    return DP_ERROR(
        "adding \"{}\" failed: a route to {} that is not dualpath's already exists "
        "in table {}; remove it or choose another table",
        w.key, w.dst.str(), w.path->table);
  if (err < 0 && w.gw)
    return DP_ERROR(
        "adding \"{}\" failed: {} (is the gateway {} on a network of {}'s addresses?{})", w.key,
        nl_geterror(err), w.gw->str(), w.path->interface,
        w.gw->family != AF_INET6 ? ""
                                 : fmt::format(" a link set down flushes its IPv6 addresses unless "
                                               "net.ipv6.conf.{}.keep_addr_on_down=1",
                                               sysctl_ifname(w.path->interface)));
  DP_TRY(nl_result(err, "adding \"" + w.key + "\" failed"));
  return {};
}

// Makes dualpath's routes those `routes` says: stale ones removed, missing
// ones added (skipped while their link is down), the rest left as they are.
Result<void> apply_routes(nl_sock* sk, const Policy& p, const std::vector<WantedRoute>& routes,
                          RoutingChange& ch) {
  std::set<std::string> want_routes;
  for (auto& w : routes) want_routes.insert(w.key);
  nl_cache* raw = nullptr;
  DP_TRY(nl_result(rtnl_route_alloc_cache(sk, AF_UNSPEC, 0, &raw), "listing routes failed"));
  CachePtr cache(raw);
  std::set<std::string> have_routes;
  for (auto* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_route*>(o);
    if (!route_is_ours(r, p)) continue;
    std::string k = route_key(r);
    if (want_routes.count(k) && !have_routes.count(k)) {
      have_routes.insert(k);
      ++ch.unchanged;
      continue;
    }
    DP_TRY(nl_result(rtnl_route_delete(sk, r, 0), "removing stale \"" + k + "\" failed"));
    ++ch.removed;
  }
  for (auto& w : routes) {
    if (have_routes.count(w.key)) continue;
    if (!link_is_up(w.ifindex)) {
      ++ch.skipped;
      continue;
    }
    // one route the kernel refuses does not keep the others, nor the rules,
    // from being applied; a route that is someone else's stops the apply
    bool conflict = false;
    if (auto a = add_route(sk, p, w, &conflict); !a) {
      if (conflict) return a.error();
      ch.refused.push_back(a.error().what());
      continue;
    }
    ++ch.added;
  }
  return {};
}

}  // namespace

Result<RoutingChange> Routing::apply(const Policy& p, const std::vector<bool>& failed) {
  auto sock = NlSocket::connect(NETLINK_ROUTE);
  if (!sock) return sock.error();
  nl_sock* sk = sock->get();
  RoutingChange ch;
  DP_TRY(apply_rules(sk, p, wanted_rules(p, failed), ch));
  auto routes = wanted_routes(p, failed);
  if (!routes) return routes.error();
  DP_TRY(apply_routes(sk, p, *routes, ch));
  return ch;
}

Result<RoutingChange> Routing::remove(const Policy& p) {
  auto sock = NlSocket::connect(NETLINK_ROUTE);
  if (!sock) return sock.error();
  nl_sock* sk = sock->get();
  RoutingChange ch;
  nl_cache* raw = nullptr;
  DP_TRY(nl_result(rtnl_route_alloc_cache(sk, AF_UNSPEC, 0, &raw), "listing routes failed"));
  CachePtr cache(raw);
  for (auto* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_route*>(o);
    if (!route_is_ours(r, p)) continue;
    DP_TRY(nl_result(rtnl_route_delete(sk, r, 0), "removing \"" + route_key(r) + "\" failed"));
    ++ch.removed;
  }
  raw = nullptr;
  DP_TRY(nl_result(rtnl_rule_alloc_cache(sk, AF_UNSPEC, &raw), "listing ip rules failed"));
  CachePtr rc(raw);
  for (auto* o = nl_cache_get_first(rc.get()); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_rule*>(o);
    if (!rule_is_ours(r, p)) continue;
    DP_TRY(nl_result(rtnl_rule_delete(sk, r, 0), "removing \"" + rule_key(r) + "\" failed"));
    ++ch.removed;
  }
  return ch;
}

Result<int> Routing::drop_unresolved_neighbours(const std::string& ifname) {
  unsigned idx = if_nametoindex(ifname.c_str());
  if (!idx) return 0;  // gone: nothing of it is queued
  auto sock = NlSocket::connect(NETLINK_ROUTE);
  if (!sock) return sock.error();
  nl_sock* sk = sock->get();
  nl_cache* raw = nullptr;
  DP_TRY(nl_result(rtnl_neigh_alloc_cache(sk, &raw), "reading the neighbour table failed"));
  CachePtr cache(raw);
  std::vector<rtnl_neigh*> unresolved;
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* n = reinterpret_cast<rtnl_neigh*>(o);
    if (rtnl_neigh_get_ifindex(n) == static_cast<int>(idx) &&
        (rtnl_neigh_get_state(n) & NUD_INCOMPLETE))
      unresolved.push_back(n);
  }
  int dropped = 0;
  for (auto* n : unresolved)
    if (rtnl_neigh_delete(sk, n, 0) >= 0) ++dropped;  // gone meanwhile: resolved or failed
  return dropped;
}

Result<std::string> Routing::neighbour_state(const IpAddr& addr, const std::string& ifname) {
  unsigned idx = if_nametoindex(ifname.c_str());
  if (!idx) return std::string();
  auto sock = NlSocket::connect(NETLINK_ROUTE);
  if (!sock) return sock.error();
  nl_cache* raw = nullptr;
  DP_TRY(
      nl_result(rtnl_neigh_alloc_cache(sock->get(), &raw), "reading the neighbour table failed"));
  CachePtr cache(raw);
  AddrPtr want = make_addr(addr, addr.family == AF_INET ? 32 : 128);
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* n = reinterpret_cast<rtnl_neigh*>(o);
    if (rtnl_neigh_get_ifindex(n) != static_cast<int>(idx) ||
        nl_addr_cmp(rtnl_neigh_get_dst(n), want.get()) != 0)
      continue;
    int st = rtnl_neigh_get_state(n);
    if (st & NUD_INCOMPLETE) return std::string("incomplete");
    if (st & NUD_FAILED) return std::string("failed");
    return std::string("resolved");
  }
  return std::string();
}

Result<std::vector<RoutingObject>> Routing::owned(const Policy& p) {
  auto sock = NlSocket::connect(NETLINK_ROUTE);
  if (!sock) return sock.error();
  nl_sock* sk = sock->get();
  std::vector<RoutingObject> out;
  nl_cache* raw = nullptr;
  DP_TRY(nl_result(rtnl_rule_alloc_cache(sk, AF_UNSPEC, &raw), "listing ip rules failed"));
  CachePtr rc(raw);
  for (auto* o = nl_cache_get_first(rc.get()); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_rule*>(o);
    if (rule_is_ours(r, p)) out.push_back({"rule", rule_key(r)});
  }
  raw = nullptr;
  DP_TRY(nl_result(rtnl_route_alloc_cache(sk, AF_UNSPEC, 0, &raw), "listing routes failed"));
  CachePtr cache(raw);
  for (auto* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_route*>(o);
    if (route_is_ours(r, p)) out.push_back({"route", route_key(r)});
  }
  return out;
}

Result<std::vector<RoutingObject>> Routing::missing(const Policy& p,
                                                    const std::vector<bool>& failed) {
  auto have = owned(p);
  if (!have) return have.error();
  std::set<std::string> keys;
  for (auto& o : *have) keys.insert(o.text);
  std::vector<RoutingObject> out;
  for (auto& w : wanted_rules(p, failed))
    if (!keys.count(rule_key(w))) out.push_back({"rule", rule_key(w)});
  auto routes = wanted_routes(p, failed);
  if (!routes) return routes.error();
  for (auto& w : *routes)
    if (!keys.count(w.key)) out.push_back({"route", w.key});
  return out;
}

}  // namespace dp
