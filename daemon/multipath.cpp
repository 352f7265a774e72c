// SPDX-License-Identifier: Apache-2.0
#include "multipath.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "dualpath/core/sockaddr.h"
#include "dualpath/kernel/datapath.h"
#include "dualpath/kernel/procfs.h"
#include "dualpath/kernel/sock_diag.h"

namespace dp {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// A subflow's ends with IPv4-mapped addresses as IPv4: a dual-stack socket
// (Java's, torch's TCPStore) connects to ::ffff:a.b.c.d, and its first
// subflow is an IPv6 socket the kernel reports so, while the rails have
// IPv4 addresses. The kernel's own view (Subflow::ends) stays as reported:
// its requests about that subflow must name it the same way.
multipath::Ends unmapped(const multipath::Ends& e) {
  return {e.local.unmapped(), e.remote.unmapped(), e.lport, e.rport};
}

// A port of `local` that no socket holds, on any device, for a join of the
// shared topology. There every join leaves from the one address, bound to its
// rail's device, and the kernel lets sockets bound to different devices take
// the same port: two joins on one port would be the same four-tuple on the
// wire, one connection to the peer, and the later one would stall. A socket
// bound to no device conflicts with every holder of a port, so the port the
// kernel gives it is free on all of them.
Result<uint16_t> free_port(const IpAddr& local) {
  int fd = ::socket(local.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return DP_ERROR("a socket to find a free port failed: {}", std::strerror(errno));
  int one = 1;
  if (local.family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  auto sa = sockaddr_of(local, 0);
  sockaddr_storage got{};
  socklen_t len = sizeof(got);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&sa.ss), sa.len);
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len);
  int err = errno;
  ::close(fd);
  if (rc != 0) return DP_ERROR("finding a free port on {}: {}", local.str(), std::strerror(err));
  return ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
}

// A new subflow's local port (0: the kernel's choice) and address id. The
// path manager keeps an id per local address and port of a connection and
// refuses an id that another holds; its own choice for a subflow made by
// command is 0, the first subflow's.
//   separate: 0 for the first subflow's address (its rail's subflow made
//   again after a failure), the rail's index + 1 for the others;
//   shared: a port of its own for each join (free_port), so an id of its
//   own too, 1-255 in turn (one still held is refused, and the next is
//   tried at the next attempt).
struct JoinSource {
  uint16_t port = 0;
  uint8_t id = 0;
};
Result<JoinSource> join_source(Topology t, multipath::Connection& c, const multipath::Action& a) {
  JoinSource out;
  if (t == Topology::Separate) {
    if (a.ends.local != c.first.local) out.id = static_cast<uint8_t>(a.path + 1);
    return out;
  }
  auto port = free_port(a.ends.local);
  if (!port) return port.error();
  out.port = *port;
  out.id = c.last_join_id = static_cast<uint8_t>(c.last_join_id % 255 + 1);
  return out;
}

// The namespace's MPTCP settings a multipath class needs, and why:
//   enabled            MPTCP sockets can be made at all;
//   path_manager       the daemon makes the subflows (userspace), not the
//                      kernel's endpoints, which are the node's and not ours
//                      (pm_type 1 before Linux 6.15);
//   blackhole_timeout  0: a blackholed rail must not turn MPTCP off for the
//                      namespace for an hour (the default 3600 s);
//   stale_loss_cnt     2: a subflow that loses two RTOs in a row is stale and
//                      its data goes on the other at once (default 4).
struct Setting {
  const char* key;
  const char* value;
};
constexpr Setting kSettings[] = {{"enabled", "1"},
                                 {"path_manager", "userspace"},
                                 {"blackhole_timeout", "0"},
                                 {"stale_loss_cnt", "2"}};

std::string sysctl_path(const std::string& key) { return "/proc/sys/net/mptcp/" + key; }

std::optional<std::string> read_sysctl(const std::string& key) {
  std::ifstream f(sysctl_path(key));
  std::string v;
  if (!f || !std::getline(f, v)) return std::nullopt;
  return v;
}

Result<void> write_sysctl(const std::string& key, const std::string& value) {
  std::ofstream f(sysctl_path(key));
  f << value << "\n";
  f.close();
  if (!f) return DP_SYS_ERROR(errno, "setting net.mptcp.{} to {} failed", key, value);
  return {};
}

std::string state_file(const std::string& node) {
  return "/run/dualpath/" + node + ".mptcp-sysctls";
}

// The kernel's key for the path manager: path_manager (6.15) or pm_type.
std::pair<std::string, std::string> pm_setting() {
  if (read_sysctl("path_manager")) return {"path_manager", "userspace"};
  return {"pm_type", "1"};
}

}  // namespace

Multipath::~Multipath() {
  if (pm_) loop_.unwatch(pm_->event_fd());
  for (auto& l : join_listeners_) {
    loop_.unwatch(l.fd);
    ::close(l.fd);
  }
}

// Only what this changes is kept for restoring, and kept before it is
// changed: a setting already as needed (made on the node by an operator,
// as a container's read-only /proc/sys requires) is not the daemon's, and a
// write that fails halfway leaves what it changed restorable. A restart
// keeps the values its predecessor kept.
Result<void> Multipath::apply_settings(const std::string& node) {
  struct Change {
    std::string key, from, to;
  };
  std::vector<Change> changes;
  for (auto s : kSettings) {
    std::string key = s.key, value = s.value;
    if (key == "path_manager") std::tie(key, value) = pm_setting();
    auto cur = read_sysctl(key);
    if (!cur) {
      if (key == "enabled" || key == "pm_type")
        return DP_ERROR("this kernel has no net.mptcp.{} (CONFIG_MPTCP is off?)", key);
      continue;  // an older kernel without the knob
    }
    if (*cur != value) changes.push_back({key, *cur, value});
  }
  if (changes.empty()) return {};
  std::string file = state_file(node), kept;
  {
    std::ifstream in(file);
    kept.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // the file as `text` says, or why not (a full or read-only /run)
  auto keep = [&file](const std::string& text) -> Result<void> {
    std::error_code ec;
    if (text.empty()) {
      std::filesystem::remove(file, ec);
      return {};
    }
    std::filesystem::create_directories("/run/dualpath", ec);
    std::ofstream f(file, std::ios::trunc);
    f << text;
    f.close();  // a full file system refuses the bytes at the flush
    if (!f) return DP_SYS_ERROR(errno, "writing {} failed", file);
    return {};
  };
  for (const auto& c : changes) {
    bool first = kept.find(c.key + "=") == std::string::npos;
    std::string with = first ? kept + c.key + "=" + c.from + "\n" : kept;
    // a value that cannot be kept is not changed: dualpathd --cleanup (and
    // the package's removal) could not give it back
    if (auto k = first ? keep(with) : Result<void>{}; !k)
      return DP_ERROR(
          "net.mptcp.{} is left at {}: the value to restore could not be kept ({}; tried again "
          "every 5 s)",
          c.key, c.from, k.error().what());
    if (auto w = write_sysctl(c.key, c.to); !w) {
      if (first) (void)keep(kept);  // unchanged: nothing of it to restore
      return w.error();
    }
    kept = with;
    spdlog::info("net.mptcp.{}: {} -> {} (multipath classes)", c.key, c.from, c.to);
  }
  return {};
}

Result<void> Multipath::restore_settings(const std::string& node) {
  std::string file = state_file(node);
  std::ifstream f(file);
  if (!f) return {};
  std::string line;
  while (std::getline(f, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    bool ours = std::any_of(std::begin(kSettings), std::end(kSettings),
                            [&](const Setting& s) { return key == s.key; }) ||
                key == "pm_type";
    if (!ours) continue;  // the file names only what this wrote
    auto cur = read_sysctl(key);
    if (cur && *cur != value) {
      DP_TRY(write_sysctl(key, value));
      spdlog::info("net.mptcp.{}: {} -> {} (restored)", key, *cur, value);
    }
  }
  std::filesystem::remove(file);
  return {};
}

Result<void> Multipath::set_policy(const Policy& p, Datapath& dp) {
  bool wanted = p.has_multipath();
  if (!dp_) dp.forget_join_listeners();  // an earlier process's
  dp_ = &dp;
  // a class a listener was opened for may be gone, or another's slot now
  for (const auto& l : join_listeners_) {
    int k = p.class_index(l.klass);
    bool still = k >= 0 && p.classes[static_cast<size_t>(k)].multipath;
    note_join_listener(l, still ? std::optional<size_t>(static_cast<size_t>(k)) : std::nullopt);
  }
  if (!wanted) {
    if (pm_) {
      loop_.unwatch(pm_->event_fd());
      pm_.reset();
      conns_.clear();
      spdlog::info("no multipath class left: MPTCP connections are left as they are");
    }
    policy_ = p;
    return restore_settings(p.node);
  }
  DP_TRY(apply_settings(p.node));
  // a reload may renumber the classes: connections take their class again
  for (auto it = conns_.begin(); it != conns_.end();) {
    const std::string& name = it->second.klass < policy_.classes.size()
                                  ? policy_.classes[it->second.klass].name
                                  : std::string();
    int k = p.class_index(name);
    if (k < 0 || !p.classes[static_cast<size_t>(k)].multipath) {
      it = conns_.erase(it);
      continue;
    }
    it->second.klass = static_cast<size_t>(k);
    ++it;
  }
  policy_ = p;
  if (!pm_) {
    auto pm = mptcp::PathManager::open();
    if (!pm) return pm.error();
    pm_ = std::move(*pm);
    loop_.watch(pm_->event_fd(), [this] { on_events(); });
    spdlog::info("multipath classes: MPTCP path manager events watched");
  }
  return {};
}

void Multipath::on_events() {
  auto n = pm_->read_events([this](const mptcp::Event& e) { on_event(e); });
  if (!n) spdlog::warn("{}", n.error().what());
}

void Multipath::on_event(const mptcp::Event& e) {
  auto now = Clock::now();
  switch (e.type) {
    case mptcp::EventType::Established:
      on_established(e, now);
      return;
    case mptcp::EventType::Created:
      on_created(e);
      return;
    case mptcp::EventType::Closed:
      conns_.erase(e.token);
      for (auto it = requested_.begin(); it != requested_.end();)
        it = it->first.first == e.token ? requested_.erase(it) : std::next(it);
      return;
    default:
      break;
  }
  auto it = conns_.find(e.token);
  if (it == conns_.end()) return;
  auto& c = it->second;
  switch (e.type) {
    case mptcp::EventType::SubEstablished:
      on_subflow_established(c, e, now);
      return;
    case mptcp::EventType::SubClosed:
      on_subflow_closed(c, e, now);
      return;
    case mptcp::EventType::SubPriority:
      // the peer set a role: on the accepting side that is the connecting
      // side's choice, shown as it is; the connecting side keeps its own
      if (!c.server_side) return;
      for (auto& s : c.subflows)
        if (s.ends == e.flow) s.backup = e.backup;
      return;
    default:
      return;
  }
}

// A connection of a multipath class: taken on, with its first subflow, and
// given its subflows on the other rails when the rails are known.
void Multipath::on_established(const mptcp::Event& e, Clock::time_point now) {
  if (conns_.count(e.token)) return;
  auto k = dp_->flow_class(e.flow.local, e.flow.lport, e.flow.remote, e.flow.rport);
  if (!k || *k >= policy_.classes.size() || !policy_.classes[*k].multipath)
    return;  // not ours: an MPTCP socket of no multipath class
  multipath::Connection c;
  c.token = e.token;
  c.klass = *k;
  c.server_side = e.server_side;
  c.first = unmapped(e.flow);
  multipath::Subflow s;
  s.ends = e.flow;
  s.path = multipath::path_of(policy_, dp_->rail_ifindexes(), c.first.local, e.ifindex);
  s.backup = e.backup;
  s.up = now;
  c.subflows.push_back(s);
  c.since = now;
  c.retry_after.assign(policy_.paths.size(),
                       e.server_side ? Clock::time_point{} : now + multipath::kFirstJoinAfter);
  c.failures.assign(policy_.paths.size(), 0);
  spdlog::debug("MPTCP connection {:#x} of class {}: {}:{} -> {}:{}{}", e.token,
                policy_.classes[*k].name, c.first.local.str(), e.flow.lport, c.first.remote.str(),
                e.flow.rport, e.server_side ? " (accepted)" : "");
  if (e.server_side) ensure_join_listeners(c.first, *k);
  auto& ref = conns_.emplace(e.token, std::move(c)).first->second;
  if (!last_want_.usable.empty())
    carry_out(ref, multipath::reconcile(policy_, ref, last_want_, now));
}

// Accepted here: the peer's joins on the other rails need a listener before
// they arrive, which is as soon as the peer sees the connection.
void Multipath::on_created(const mptcp::Event& e) {
  if (!e.server_side) return;
  auto k = dp_->flow_class(e.flow.local, e.flow.lport, e.flow.remote, e.flow.rport);
  if (k && *k < policy_.classes.size() && policy_.classes[*k].multipath)
    ensure_join_listeners(unmapped(e.flow), *k);
}

// A subflow of a connection of ours is up: listed on its rail, with the role
// this end asked for when it made it.
void Multipath::on_subflow_established(multipath::Connection& c, const mptcp::Event& e,
                                       Clock::time_point now) {
  auto same = [&](const multipath::Subflow& s) { return s.ends == e.flow; };
  if (std::any_of(c.subflows.begin(), c.subflows.end(), same)) return;
  multipath::Subflow s;
  s.ends = e.flow;
  s.path = multipath::path_of(policy_, dp_->rail_ifindexes(), e.flow.local.unmapped(), e.ifindex);
  // the shared topology: a join accepted here is on the rail the peer
  // bound it to, which it arrives and is answered on (bpf/lib/tc.h)
  if (s.path == multipath::kNoPath && c.server_side)
    s.path = dp_->flow_path(e.flow.local, e.flow.lport, e.flow.remote, e.flow.rport)
                 .value_or(multipath::kNoPath);
  s.backup = e.backup;
  if (auto r = requested_.find({c.token, s.path}); r != requested_.end() && !c.server_side) {
    s.backup = r->second.backup;
    requested_.erase(r);
  }
  multipath::note_answered(c, s.path);
  s.up = now;
  c.subflows.push_back(s);
}

// A subflow of a connection of ours closed, or one asked for could not be
// made: noted, so that it is made again after a backoff.
void Multipath::on_subflow_closed(multipath::Connection& c, const mptcp::Event& e,
                                  Clock::time_point now) {
  auto s = std::find_if(c.subflows.begin(), c.subflows.end(),
                        [&](const multipath::Subflow& x) { return x.ends == e.flow; });
  const bool listed = s != c.subflows.end();
  size_t path = listed ? s->path
                       : multipath::path_of(policy_, dp_->rail_ifindexes(), e.flow.local.unmapped(),
                                            e.ifindex);
  const std::string rail = path < policy_.paths.size() ? policy_.paths[path].name : "-";
  const std::string why = e.error ? fmt::format(" ({})", std::strerror(e.error)) : "";
  // the connecting side: a subflow still listed was not removed by us,
  // so the kernel or the peer ended it (a join refused, a reset, a
  // timeout); it is made again after a backoff
  if (listed && !c.server_side)
    spdlog::info("class {} connection {:#x}: its subflow on {} closed{}",
                 policy_.classes[c.klass].name, c.token, rail, why);
  const Clock::time_point up = listed ? s->up : Clock::time_point{};
  if (listed) c.subflows.erase(s);
  if (auto r = requested_.find({c.token, path}); !listed && r != requested_.end()) {
    spdlog::info("class {} connection {:#x}: its subflow on {} could not be made{}",
                 policy_.classes[c.klass].name, c.token, rail, why);
    requested_.erase(r);
    multipath::note_answered(c, path);
  } else if (!listed && !c.server_side) {
    // a join this end asked for and no longer waits on: counted already,
    // when end_overdue_joins gave it up
    return;
  }
  if (multipath::note_closed(c, path, up, now)) gave_up(c, path);
}

void Multipath::end_overdue_joins(multipath::Connection& c, Clock::time_point now) {
  for (size_t path : multipath::overdue_joins(c, now)) {
    const std::string rail = path < policy_.paths.size() ? policy_.paths[path].name : "-";
    auto r = requested_.find({c.token, path});
    Result<std::vector<TcpSocketInfo>> ended = std::vector<TcpSocketInfo>{};
    if (r != requested_.end()) {
      const multipath::Ends& asked = r->second.ends;
      // still sending its SYN: a subflow of this connection (by its token,
      // so that no other socket, an application's own connect among them,
      // is touched; the separate topology's joins take a port of the
      // kernel's choosing)
      ended = destroy_tcp(
          {asked.local},
          [&](const TcpSocketInfo& s) {
            return s.state == TCP_SYN_SENT && s.mptcp_token == c.token &&
                   s.dst.unmapped() == asked.remote.unmapped() && s.dport == asked.rport &&
                   (asked.lport == 0 || s.sport == asked.lport);
          },
          true);
    }
    if (ended && !ended->empty()) {
      // its SUB_CLOSED event counts the failure (on_subflow_closed); should
      // that never come, it is counted here after another kJoinTimeout
      spdlog::info(
          "class {} connection {:#x}: its join on {} did not come up within {} ms: ended",
          policy_.classes[c.klass].name, c.token, rail,
          std::chrono::duration_cast<std::chrono::milliseconds>(multipath::kJoinTimeout).count());
      multipath::note_asked(c, path, now);
      continue;
    }
    if (!ended)
      spdlog::warn(
          "class {} connection {:#x}: its join on {} that never came up could not be "
          "ended ({}); it is counted as failed",
          policy_.classes[c.klass].name, c.token, rail, ended.error().what());
    if (r != requested_.end()) requested_.erase(r);
    multipath::note_answered(c, path);
    if (multipath::note_failure(c, path, now)) gave_up(c, path);
  }
}

void Multipath::gave_up(const multipath::Connection& c, size_t path) {
  spdlog::warn(
      "class {} connection {:#x}: {} joins in a row on {} never came up (a firewall or middlebox "
      "that drops or refuses MPTCP's MP_JOIN?): asked again only every {} min; the connection "
      "goes on with its other subflows",
      policy_.classes[c.klass].name, c.token, multipath::kGiveUpAfter,
      path < policy_.paths.size() ? policy_.paths[path].name : "-",
      std::chrono::duration_cast<std::chrono::minutes>(multipath::kGiveUpFor).count());
}

void Multipath::carry_out(multipath::Connection& c, const std::vector<multipath::Action>& actions) {
  using Kind = multipath::Action::Kind;
  auto now = Clock::now();
  for (const auto& a : actions) {
    const std::string& path = a.path < policy_.paths.size() ? policy_.paths[a.path].name : "-";
    Result<void> r;
    if (a.kind == Kind::Create) {
      multipath::Ends asked = a.ends;
      if (auto src = join_source(policy_.topology, c, a); !src)
        r = src.error();
      else {
        asked.lport = src->port;
        r = pm_->create(c.token, a.ends.local, src->port, src->id,
                        static_cast<int>(dp_->rail_ifindex(a.path)), a.backup, a.ends.remote,
                        a.ends.rport);
      }
      if (r) {
        ++counters_.created;
        requested_[{c.token, a.path}] = {a.backup, asked};
        multipath::note_asked(c, a.path, now);  // none asked for there until it is answered
      }
    } else if (a.kind == Kind::Destroy) {
      r = pm_->destroy(c.token, a.ends);
      for (const auto& s : c.subflows)
        if (s.ends == a.ends) multipath::note_removed(c, a.path, s.up, now);
      c.subflows.erase(
          std::remove_if(c.subflows.begin(), c.subflows.end(),
                         [&](const multipath::Subflow& s) { return s.ends == a.ends; }),
          c.subflows.end());
      if (r) {
        ++counters_.removed;
        ++done_[{c.klass, a.path, "removed"}];
      }
    } else {
      r = pm_->set_backup(c.token, a.ends, a.backup);
      if (r) {
        ++counters_.role_changes;
        ++done_[{c.klass, a.path, a.backup ? "backup" : "active"}];
        for (auto& s : c.subflows)
          if (s.ends == a.ends) s.backup = a.backup;
      }
    }
    if (!r) {
      ++counters_.failed;
      spdlog::warn("class {} path {}: {}", policy_.classes[c.klass].name, path, r.error().what());
      if (a.kind == Kind::Create && multipath::note_failure(c, a.path, now)) gave_up(c, a.path);
    } else {
      spdlog::debug("class {} connection {:#x}: {} subflow on {}{}", policy_.classes[c.klass].name,
                    c.token,
                    a.kind == Kind::Create    ? "new"
                    : a.kind == Kind::Destroy ? "removed"
                                              : "re-prioritised",
                    path, a.backup ? " (backup)" : "");
    }
  }
}

void Multipath::reconcile(const multipath::Want& want) {
  if (!pm_) return;
  last_want_ = want;
  auto now = Clock::now();
  for (auto& [token, c] : conns_) {
    end_overdue_joins(c, now);
    carry_out(c, multipath::reconcile(policy_, c, want, now));
  }
  expire_join_listeners();
}

void Multipath::note_join_listener(const JoinListener& l, std::optional<size_t> klass) {
  if (auto r = dp_->note_join_listener(l.addr, l.port, klass); !r)
    spdlog::warn("the join listener on {} port {}: {}", l.addr.str(), l.port, r.error().what());
}

void Multipath::ensure_join_listeners(const multipath::Ends& accepted, size_t klass) {
  for (const auto& ps : policy_.paths) {
    const auto& src = accepted.local.family == AF_INET6 ? ps.source6 : ps.source;
    if (!src || *src == accepted.local) continue;
    bool have = std::any_of(join_listeners_.begin(), join_listeners_.end(),
                            [&](auto& l) { return l.addr == *src && l.port == accepted.lport; });
    if (have) continue;
    auto sa = sockaddr_of(*src, accepted.lport);
    int fd = ::socket(src->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_MPTCP);
    if (fd < 0) {
      spdlog::warn("a join listener on {} port {}: socket failed: {}", src->str(), accepted.lport,
                   std::strerror(errno));
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (src->family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa.ss), sa.len) != 0 || ::listen(fd, 64) != 0) {
      int err = errno;
      ::close(fd);
      // EADDRINUSE: the application listens there too, or on every address
      if (err != EADDRINUSE)
        spdlog::warn("a join listener on {} port {}: {}", src->str(), accepted.lport,
                     std::strerror(err));
      continue;
    }
    join_listeners_.push_back({fd, *src, accepted.lport, policy_.classes.at(klass).name, {}});
    note_join_listener(join_listeners_.back(), klass);
    loop_.watch(fd, [this, fd] { on_join_listener(fd); });
    spdlog::info("multipath: listening for joins on {} port {} (the server listens on {} only)",
                 src->str(), accepted.lport, accepted.local.str());
  }
}

// What reaches a join listener and is not a join is a new connection for a
// port nothing else listens on there: refused, as it would be without us.
void Multipath::on_join_listener(int fd) {
  for (;;) {
    int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) break;
    linger l{1, 0};  // a reset, not an orderly close
    ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(c);
  }
}

// A join listener stays while a connection accepted on its port does, and
// 30 s after (a reconnect comes back to the same port).
void Multipath::expire_join_listeners() {
  auto now = Clock::now();
  for (auto& l : join_listeners_) {
    bool used = std::any_of(conns_.begin(), conns_.end(), [&](auto& kv) {
      return kv.second.server_side && kv.second.first.lport == l.port;
    });
    if (used) {
      l.idle_since = {};
      continue;
    }
    if (l.idle_since == Clock::time_point{}) l.idle_since = now;
    if (now - l.idle_since < std::chrono::seconds(30)) continue;
    note_join_listener(l, std::nullopt);
    loop_.unwatch(l.fd);
    ::close(l.fd);
    l.fd = -1;
  }
  join_listeners_.erase(std::remove_if(join_listeners_.begin(), join_listeners_.end(),
                                       [](const JoinListener& l) { return l.fd < 0; }),
                        join_listeners_.end());
}

uint64_t Multipath::kernel_fallbacks() { return mptcp_fallbacks(); }

std::vector<SchedulerEvent> Multipath::take_events() {
  std::vector<SchedulerEvent> out;
  for (const auto& [key, n] : done_) {
    const auto& [klass, path, what] = key;
    if (klass >= policy_.classes.size() || path >= policy_.paths.size()) continue;
    const std::string& cls = policy_.classes[klass].name;
    const std::string& rail = policy_.paths[path].name;
    SchedulerEvent e;
    e.t = SchedClock::now();
    e.klass = cls;
    e.path = rail;
    e.kind = "multipath";
    std::string conns = fmt::format("{} MPTCP connection{}", n, n == 1 ? "" : "s");
    if (what == "removed")
      e.reason = fmt::format(
          "{}: {} lost {} subflow{} on {} ({} is not usable); {} on over the "
          "other rails",
          cls, conns, n == 1 ? "its" : "their", n == 1 ? "" : "s", rail, rail,
          n == 1 ? "it goes" : "they go");
    else
      e.reason = fmt::format("{}: the {} subflow{} of {} made {} (the class's decision)", cls, rail,
                             n == 1 ? "" : "s", conns, what);
    out.push_back(std::move(e));
  }
  done_.clear();
  return out;
}

bool Multipath::is_subflow(const IpAddr& local, uint16_t lport) const {
  for (const auto& [token, c] : conns_)
    for (const auto& s : c.subflows)
      if (s.ends.lport == lport && s.ends.local.unmapped() == local.unmapped()) return true;
  return false;
}

// A subflow's rail: the one it was made on, unless the datapath places it
// (an accepted connection's joins in the shared topology; a first subflow
// from an address of no rail, such as a service address on lo, which is
// steered as any flow of its class).
bool Multipath::bound(const multipath::Connection& c, const multipath::Subflow& s) const {
  bool fixed =
      !c.server_side || policy_.topology == Topology::Separate || unmapped(s.ends) == c.first;
  return fixed && s.path < policy_.paths.size();
}

size_t Multipath::path_now(const multipath::Connection& c, const multipath::Subflow& s) const {
  if (bound(c, s)) return s.path;
  return dp_->flow_path(s.ends.local, s.ends.lport, s.ends.remote, s.ends.rport).value_or(s.path);
}

std::vector<std::vector<size_t>> Multipath::subflows_per_path() const {
  std::vector<std::vector<size_t>> out(policy_.classes.size(),
                                       std::vector<size_t>(policy_.paths.size(), 0));
  for (const auto& [token, c] : conns_)
    for (const auto& s : c.subflows) {
      size_t path = path_now(c, s);
      if (c.klass < out.size() && path < policy_.paths.size()) ++out[c.klass][path];
    }
  return out;
}

json Multipath::connections_json() const {
  // What each subflow sent: the flow table counts it where the datapath
  // places it; the subflows the datapath leaves on their rail without a
  // flow entry (joins bound to their rail, joins answered on the rail they
  // arrived on) only TCP counts, in tcp_info's bytes_acked.
  auto name = [](const multipath::Ends& e) {
    return fmt::format("{}:{}-{}:{}", e.local.str(), e.lport, e.remote.str(), e.rport);
  };
  std::map<std::string, uint64_t> acked;
  if (!conns_.empty())
    if (auto socks = tcp_sockets(kTcpAllButListen, true))
      for (const auto& t : *socks)
        acked[name({t.src.unmapped(), t.dst.unmapped(), t.sport, t.dport})] = t.bytes_acked;
  json out = json::array();
  for (const auto& [token, c] : conns_) {
    json subs = json::array();
    for (const auto& s : c.subflows) {
      size_t path = path_now(c, s);
      const auto ends = unmapped(s.ends);
      uint64_t bytes = dp_->flow_bytes(s.ends.local, s.ends.lport, s.ends.remote, s.ends.rport);
      if (auto a = acked.find(name(ends)); a != acked.end()) bytes = std::max(bytes, a->second);
      subs.push_back(
          {{"path", path < policy_.paths.size() ? json(policy_.paths[path].name) : json(nullptr)},
           {"role", s.backup ? "backup" : "active"},
           {"bound", bound(c, s)},
           {"local", ends.local.str()},
           {"lport", s.ends.lport},
           {"remote", ends.remote.str()},
           {"rport", s.ends.rport},
           {"bytes", bytes}});
    }
    out.push_back({{"token", token},
                   {"class", policy_.classes[c.klass].name},
                   {"side", c.server_side ? "accepted" : "connected"},
                   {"local", c.first.local.str()},
                   {"lport", c.first.lport},
                   {"remote", c.first.remote.str()},
                   {"rport", c.first.rport},
                   {"subflows", subs}});
  }
  return out;
}

}  // namespace dp
