// SPDX-License-Identifier: Apache-2.0
#include "path_monitor.h"

#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/errno.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dualpath/core/units.h"

#ifndef IFF_LOWER_UP
#define IFF_LOWER_UP 0x10000  // <linux/if.h>, which clashes with <net/if.h>
#endif

namespace dp {

namespace {

uint32_t random_discriminator() {
  static std::mt19937 rng(std::random_device{}());
  uint32_t d = 0;
  while (!d) d = static_cast<uint32_t>(rng());
  return d;
}

bfd::Config bfd_config(const HealthSettings& h) {
  bfd::Config c;
  c.desired_min_tx = std::chrono::duration_cast<bfd::Micros>(h.interval);
  c.required_min_rx = c.desired_min_tx;
  c.detect_mult = static_cast<uint8_t>(h.multiplier);
  return c;
}

}  // namespace

PathMonitor::PathMonitor(EventLoop& loop, Controller& controller, std::function<void()> changed)
    : loop_(loop), controller_(controller), changed_(std::move(changed)) {
  loop_.add_deadline([this] { return next_wakeup(); });
  loop_.after_wake([this] { service(); });
}

PathMonitor::~PathMonitor() {
  for (auto& s : sessions_)
    if (s.io) loop_.unwatch(s.io->rx_fd());
  if (link_events_) loop_.unwatch(link_events_.fd());
}

bool PathMonitor::carrier_of(const std::string& ifname) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  bool up = ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP) &&
            (ifr.ifr_flags & IFF_RUNNING);
  ::close(fd);
  return up;
}

Result<bfd::Auth> PathMonitor::read_auth(const HealthSettings& h) {
  bfd::Auth a;
  a.type = static_cast<bfd::AuthType>(h.bfd_auth);
  if (a.type == bfd::AuthType::None) return a;
  a.key_id = h.bfd_auth_key_id;
  const std::string& file = h.bfd_auth_key_file;
  // O_NONBLOCK: a FIFO there must not hold the daemon
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return DP_ERROR(
        "bfd_auth_key_file {} in [health]: cannot read it: {} (it holds the key BFD "
        "shares with each rail's peer, 1 to 20 bytes)",
        file, std::strerror(errno));
  struct stat st {};
  char buf[bfd::kMaxKey + 2];
  ssize_t n = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? ::read(fd, buf, sizeof(buf)) : -1;
  ::close(fd);
  if (n < 0) return DP_ERROR("bfd_auth_key_file {} in [health] is not a readable file", file);
  if (st.st_uid != ::geteuid())
    return DP_ERROR(
        "bfd_auth_key_file {} in [health] belongs to uid {}, not to the daemon's ({}): "
        "whoever owns it can change the key; chown {} {}",
        file, st.st_uid, ::geteuid(), ::geteuid(), file);
  if (st.st_mode & 077)
    return DP_ERROR(
        "bfd_auth_key_file {} in [health] may be read or written by others than its "
        "owner (mode {:04o}): whoever can read it can forge BFD; chmod 600 {}",
        file, st.st_mode & 07777, file);
  std::string key(buf, static_cast<size_t>(n));
  if (!key.empty() && key.back() == '\n') key.pop_back();
  if (key.empty() || key.size() > bfd::kMaxKey)
    return DP_ERROR(
        "bfd_auth_key_file {} in [health] holds {} bytes: a keyed SHA1 key is 1 to "
        "20 (a final newline is not part of it)",
        file, key.size() > bfd::kMaxKey ? "more than 20" : "0");
  a.key = std::move(key);
  return a;
}

void PathMonitor::setup(const Policy& next, const std::vector<uint32_t>& ifindex,
                        const bfd::Auth& auth) {
  auto now = SchedClock::now();
  std::vector<Session> old;
  old.swap(sessions_);
  for (auto& s : old)
    if (s.io) loop_.unwatch(s.io->rx_fd());
  names_.clear();
  for (size_t i = 0; i < next.paths.size(); ++i) {
    const auto& ps = next.paths[i];
    names_.push_back(ps.name);
    // the BFD socket carries the redirect bit: a new one makes a new session
    // and the authentication: new ones make a new session (the key's hash
    // stands for the key, which is kept in no other string)
    // and so does another interface of the same name (its socket is bound
    // to the device that was there when it was opened)
    std::string key =
        rail_key(next, i) + fmt::format("|{:#x}|{}|{}|{:x}|{}", next.routing.redirect_mark,
                                        static_cast<int>(auth.type), auth.key_id,
                                        std::hash<std::string>{}(auth.key),
                                        i < ifindex.size() ? ifindex[i] : 0u);
    auto it = std::find_if(old.begin(), old.end(), [&](const Session& s) { return s.key == key; });
    if (it != old.end()) {
      sessions_.push_back(std::move(*it));
      old.erase(it);
      if (sessions_.back().bfd) sessions_.back().bfd->set_config(bfd_config(next.health), now);
    } else {
      // a rail whose session is made anew (its authentication or mark
      // changed): what the old one said no longer stands, and the new one
      // may never come up (the peer has another key), so the rail is judged
      // as one without a session until it does
      const std::string rail = rail_key(next, i) + "|";
      if (std::any_of(old.begin(), old.end(),
                      [&](const Session& o) { return o.bfd && o.key.rfind(rail, 0) == 0; }))
        controller_.bfd(i, bfd::State::AdminDown, bfd::Diag::AdminDown, true, now);
      Session s{key, nullptr, std::nullopt, 0, ""};
      auto peer = next.health.bfd ? ps.bfd_address() : std::nullopt;
      if (peer) {
        auto ep = BfdEndpoint::open(ps.interface, *peer, next.routing.redirect_mark, auth);
        if (!ep) {
          spdlog::error("path {}: BFD toward {} is off: {}", ps.name, peer->str(),
                        ep.error().what());
        } else {
          s.io = std::move(*ep);
          s.bfd.emplace(bfd_config(next.health), random_discriminator(), now,
                        random_discriminator());
          // 6.7.4: the first sequence number is random
          s.bfd->set_auth(auth.type, random_discriminator());
          spdlog::info("path {}: BFD toward {} on {} (interval {}, multiplier {}{})", ps.name,
                       peer->str(), ps.interface, format_duration(next.health.interval),
                       next.health.multiplier,
                       auth.type == bfd::AuthType::None
                           ? ""
                           : fmt::format(", {} key ID {}", bfd::to_string(auth.type), auth.key_id));
        }
      }
      sessions_.push_back(std::move(s));
    }
    if (sessions_.back().io)
      loop_.watch(sessions_.back().io->rx_fd(), [this, i] { on_readable(i); });
  }
  for (auto& s : old)  // paths the policy no longer names: tell their peers
    if (s.bfd && s.io) {
      s.bfd->set_admin_down(true, now);
      if (auto p = s.bfd->transmit(now)) (void)s.io->send(*p);
    }
  ifindex_ = ifindex;
}

Result<void> PathMonitor::open_link_events() {
  auto events = NlSocket::subscribe(RTNLGRP_LINK);
  if (!events) return DP_ERROR("link events: {}", events.error().what());
  link_events_ = std::move(*events);
  nl_socket_modify_cb(
      link_events_.get(), NL_CB_VALID, NL_CB_CUSTOM,
      [](nl_msg* msg, void* arg) -> int {
        auto* self = static_cast<PathMonitor*>(arg);
        nlmsghdr* h = nlmsg_hdr(msg);
        if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) return NL_OK;
        auto* ifi = static_cast<ifinfomsg*>(nlmsg_data(h));
        bool up = h->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) &&
                  (ifi->ifi_flags & IFF_LOWER_UP);
        auto now = SchedClock::now();
        for (size_t i = 0; i < self->ifindex_.size(); ++i)
          if (self->ifindex_[i] == static_cast<uint32_t>(ifi->ifi_index))
            self->controller_.carrier(i, up, now);
        return NL_OK;
      },
      this);
  loop_.watch(link_events_.fd(), [this] {
    int r;
    while ((r = nl_recvmsgs_default(link_events_.get())) >= 0) {
    }
    // Anything but "no more" is ENOBUFS (libnl's NLE_NOMEM) or worse: the
    // kernel dropped events while the socket's buffer was full (a churn of
    // links, a daemon stopped for a while). A rail's carrier change may be
    // among them, and the next event of that rail may never come: each
    // rail's carrier is read again.
    if (r != -NLE_AGAIN) reread_carrier(r);
    changed_();
  });
  return {};
}

void PathMonitor::reread_carrier(int error) {
  ++overflows_;
  auto now = SchedClock::now();
  std::string states;
  for (size_t i = 0; i < ifindex_.size(); ++i) {
    char name[IF_NAMESIZE] = {};
    if (!::if_indextoname(ifindex_[i], name)) continue;  // gone: the tick's check says so
    bool up = carrier_of(name);
    controller_.carrier(i, up, now);
    states += fmt::format("{}{} {}", states.empty() ? "" : ", ", names_[i], up ? "up" : "down");
  }
  spdlog::warn(
      "link events may have been lost ({}: the netlink socket's buffer overflowed); carrier "
      "read again: {}; policy routing is checked at the next tick",
      nl_geterror(error), states);
}

void PathMonitor::on_readable(size_t i) {
  if (i >= sessions_.size()) return;
  Session& s = sessions_[i];
  if (!s.io || !s.bfd) return;
  auto now = SchedClock::now();
  for (auto& rx : s.io->receive()) {
    std::optional<std::string> why;
    if (!rx.packet)
      why = rx.packet.error().what();
    else
      why = s.bfd->receive(*rx.packet, now);
    if (why) {
      ++s.discarded;
      // one that does not authenticate is a configuration to mend (another
      // key, type or key ID at the peer) or a forgery: said, once a reason
      if (*why != s.last_discard) {
        if (why->find("authentication") != std::string::npos)
          spdlog::warn("path {}: BFD packet discarded: {}", names_[i], *why);
        else
          spdlog::debug("path {}: BFD packet discarded: {}", names_[i], *why);
      }
      s.last_discard = *why;
    }
  }
  if (auto p = s.bfd->transmit(now)) (void)s.io->send(*p);  // a Final, or a due packet
  transitions(i);
  changed_();
}

void PathMonitor::transitions(size_t i) {
  Session& s = sessions_[i];
  for (auto& t : s.bfd->take_transitions()) {
    spdlog::info("path {}: BFD {} -> {}{}", names_[i], bfd::to_string(t.from), bfd::to_string(t.to),
                 t.diag == bfd::Diag::None ? "" : fmt::format(" ({})", bfd::to_string(t.diag)));
    if (t.peer_restarted)
      controller_.bfd_peer_restarted(i, t.t);
    else
      controller_.bfd(i, t.to, t.diag, s.bfd->remote_state() == bfd::State::AdminDown, t.t);
  }
}

void PathMonitor::service() {
  auto now = SchedClock::now();
  bool any = false;
  for (size_t i = 0; i < sessions_.size(); ++i) {
    Session& s = sessions_[i];
    if (!s.bfd || !s.io || s.bfd->next_wakeup() > now) continue;
    if (auto p = s.bfd->transmit(now)) {
      auto r = s.io->send(*p);
      if (!r) spdlog::debug("{}", r.error().what());  // a rail without carrier says ENETDOWN
    }
    transitions(i);
    any = true;
  }
  if (any) changed_();
}

std::optional<SchedClock::time_point> PathMonitor::next_wakeup() const {
  std::optional<SchedClock::time_point> next;
  for (const auto& s : sessions_)
    if (s.bfd && (!next || s.bfd->next_wakeup() < *next)) next = s.bfd->next_wakeup();
  return next;
}

void PathMonitor::send_admin_down() {
  auto now = SchedClock::now();
  for (auto& s : sessions_) {
    if (!s.bfd || !s.io) continue;
    s.bfd->set_admin_down(true, now);
    if (auto p = s.bfd->transmit(now)) (void)s.io->send(*p);
  }
}

std::optional<BfdView> PathMonitor::bfd(size_t path) const {
  if (path >= sessions_.size() || !sessions_[path].bfd) return std::nullopt;
  const auto& s = sessions_[path];
  return BfdView{s.io ? s.io->peer().str() : "", &*s.bfd, s.discarded};
}

}  // namespace dp
