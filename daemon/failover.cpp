// Path health and failover in the daemon: BFD sessions per rail, carrier from
// rtnetlink link events, data-path evidence from the sockops TCP counters;
// each rail's RailHealth turns them into a state, and health_changed() turns
// the states into decisions (first) and policy routing (second).
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <random>

#include <fmt/chrono.h>

#include <spdlog/spdlog.h>

#include "daemon.h"
#include "dualpath/core/encode.h"
#include "dualpath/core/units.h"
#include "dualpath/kernel/routing.h"

#ifndef IFF_LOWER_UP
#define IFF_LOWER_UP 0x10000  // <linux/if.h>, which clashes with <net/if.h>
#endif

namespace dp {
namespace {

constexpr size_t kMaxEvents = 1024;
// Data-path evidence: a rail is suspect when, within one tick, its flows had
// an RTO and retransmitted more than kRetransRatio of the segments they sent,
// while no other rail's flows did the same. An RTO is required: fast
// retransmits alone are what a congested rail does (the lab's spill test
// suspected a saturated rail0 on them), while a blackhole or heavy loss ends
// in RTOs.
constexpr double kRetransRatio = 0.10;
constexpr double kBusy = 0.80;  // utilisation above which retransmits are congestion

bool carrier_of(const std::string& ifname) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  bool up = ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP) &&
            (ifr.ifr_flags & IFF_RUNNING);
  ::close(fd);
  return up;
}

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

void Daemon::watch_fd(int fd) {
  if (epoll_fd_ < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void Daemon::unwatch_fd(int fd) {
  if (epoll_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

// After a policy is applied: one Rail per path. A path whose interface and BFD
// peer did not change keeps its health, session and hold-down.
void Daemon::setup_health(const Policy& next) {
  auto now = SchedClock::now();
  std::vector<Rail> old;
  old.swap(rails_);
  for (auto& [fd, i] : bfd_fds_) unwatch_fd(fd);
  bfd_fds_.clear();
  for (size_t i = 0; i < next.paths.size(); ++i) {
    const auto& ps = next.paths[i];
    auto peer = next.health.bfd ? ps.bfd_address() : std::nullopt;
    std::string key = ps.name + "|" + ps.interface + "|" + (peer ? peer->str() : "");
    auto it = std::find_if(old.begin(), old.end(), [&](const Rail& r) { return r.key == key; });
    if (it != old.end()) {
      rails_.push_back(std::move(*it));
      old.erase(it);
      rails_.back().health.set_settings(next.health);
      if (rails_.back().bfd) rails_.back().bfd->set_config(bfd_config(next.health), now);
    } else {
      Rail r{RailHealth(next.health, now), nullptr, std::nullopt, 0, "", {}, key};
      r.health.carrier(carrier_of(ps.interface), now);
      if (peer) {
        auto ep = BfdEndpoint::open(ps.interface, *peer);
        if (!ep) {
          spdlog::error("path {}: BFD toward {} is off: {}", ps.name, peer->str(),
                        ep.error().what());
        } else {
          r.io = std::move(*ep);
          r.bfd.emplace(bfd_config(next.health), random_discriminator(), now,
                        random_discriminator());
          spdlog::info("path {}: BFD toward {} on {} (interval {}, multiplier {})", ps.name,
                       peer->str(), ps.interface, format_duration(next.health.interval),
                       next.health.multiplier);
        }
      }
      (void)r.health.take_events();
      rails_.push_back(std::move(r));
    }
    if (rails_.back().io) bfd_fds_[rails_.back().io->rx_fd()] = i;
  }
  for (auto& r : old)  // paths the policy no longer names: tell their peers
    if (r.bfd && r.io) {
      r.bfd->set_admin_down(true, now);
      if (auto p = r.bfd->transmit(now)) (void)r.io->send(*p);
    }
  for (auto& [fd, i] : bfd_fds_) watch_fd(fd);
  former_.assign(next.paths.size(), std::vector<double>(next.classes.size(), 0));
  written_.assign(next.classes.size(), Shares{});
  routed_failed_.assign(next.paths.size(), false);
}

Result<void> Daemon::open_link_events() {
  link_events_ = {nl_socket_alloc(), nl_socket_free};
  nl_sock* sk = link_events_.get();
  if (!sk) return DP_SYS_ERROR(ENOMEM, "allocating a netlink socket failed");
  nl_socket_disable_seq_check(sk);
  nl_socket_modify_cb(
      sk, NL_CB_VALID, NL_CB_CUSTOM,
      [](nl_msg* msg, void* arg) -> int {
        auto* self = static_cast<Daemon*>(arg);
        nlmsghdr* h = nlmsg_hdr(msg);
        if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) return NL_OK;
        auto* ifi = static_cast<ifinfomsg*>(nlmsg_data(h));
        bool up = h->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) &&
                  (ifi->ifi_flags & IFF_LOWER_UP);
        auto now = SchedClock::now();
        for (size_t i = 0; i < self->rails_.size() && i < self->rail_ifindex_.size(); ++i)
          if (self->rail_ifindex_[i] == static_cast<uint32_t>(ifi->ifi_index))
            self->rails_[i].health.carrier(up, now);
        return NL_OK;
      },
      this);
  int err = nl_connect(sk, NETLINK_ROUTE);
  if (err < 0) return DP_ERROR("connecting to rtnetlink failed: {}", nl_geterror(err));
  err = nl_socket_add_membership(sk, RTNLGRP_LINK);
  if (err < 0) return DP_ERROR("subscribing to link events failed: {}", nl_geterror(err));
  nl_socket_set_nonblocking(sk);
  return {};
}

void Daemon::on_link_events() {
  while (nl_recvmsgs_default(link_events_.get()) >= 0) {
  }
  health_changed();
}

void Daemon::on_bfd_readable(size_t i) {
  if (i >= rails_.size()) return;
  Rail& r = rails_[i];
  if (!r.io || !r.bfd) return;
  auto now = SchedClock::now();
  for (auto& rx : r.io->receive()) {
    std::optional<std::string> why;
    if (!rx.packet)
      why = rx.packet.error().what();
    else
      why = r.bfd->receive(*rx.packet, now);
    if (why) {
      ++r.bfd_discarded;
      if (*why != r.bfd_last_discard)
        spdlog::debug("path {}: BFD packet discarded: {}", policy_.paths[i].name, *why);
      r.bfd_last_discard = *why;
    }
  }
  if (auto p = r.bfd->transmit(now)) (void)r.io->send(*p);  // a Final, or a due packet
  bfd_transitions(i);
  health_changed();
}

void Daemon::bfd_transitions(size_t i) {
  Rail& r = rails_[i];
  for (auto& t : r.bfd->take_transitions()) {
    spdlog::info("path {}: BFD {} -> {}{}", policy_.paths[i].name, bfd::to_string(t.from),
                 bfd::to_string(t.to),
                 t.diag == bfd::Diag::None ? "" : fmt::format(" ({})", bfd::to_string(t.diag)));
    r.health.bfd(t.to, t.diag, r.bfd->remote_state() == bfd::State::AdminDown, t.t);
  }
}

void Daemon::service_bfd() {
  auto now = SchedClock::now();
  bool any = false;
  for (size_t i = 0; i < rails_.size(); ++i) {
    Rail& r = rails_[i];
    if (!r.bfd || !r.io || r.bfd->next_wakeup() > now) continue;
    if (auto p = r.bfd->transmit(now)) {
      auto s = r.io->send(*p);
      if (!s) spdlog::debug("{}", s.error().what());  // a rail without carrier says ENETDOWN
    }
    bfd_transitions(i);
    any = true;
  }
  if (any) health_changed();
}

int Daemon::next_timeout_ms() const {
  auto now = SchedClock::now();
  std::optional<SchedClock::time_point> next;
  for (const auto& r : rails_)
    if (r.bfd && (!next || r.bfd->next_wakeup() < *next)) next = r.bfd->next_wakeup();
  if (!next) return -1;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

void Daemon::send_admin_down() {
  auto now = SchedClock::now();
  for (auto& r : rails_) {
    if (!r.bfd || !r.io) continue;
    r.bfd->set_admin_down(true, now);
    if (auto p = r.bfd->transmit(now)) (void)r.io->send(*p);
  }
}

// A burst of retransmits or RTOs on one rail's flows while the others' are
// clean: suspect the rail before BFD can tell.
void Daemon::check_evidence() {
  const size_t R = rails_.size();
  std::vector<uint64_t> rto(R), retrans(R), segs(R);
  for (size_t i = 0; i < R; ++i) {
    TcpCounters now{};
    for (size_t c = 0; c < DP_MAX_CLASSES; ++c)
      add_tcp(now, tcp_[static_cast<size_t>(rail_slot_[i])][c]);
    auto& prev = rails_[i].tcp_prev;
    rto[i] = now.rto_events - std::min(prev.rto_events, now.rto_events);
    retrans[i] = now.retrans_segs - std::min(prev.retrans_segs, now.retrans_segs);
    segs[i] = now.segs_out - std::min(prev.segs_out, now.segs_out);
    prev = now;
  }
  // An RTO counts when it is a large part of what the rail sent in the tick
  // (a blackhole: flows send almost nothing but their retransmissions), not
  // the odd tail-loss RTO of a busy rail with 1% loss.
  auto bad = [&](size_t i) {
    double ratio =
        static_cast<double>(retrans[i]) / static_cast<double>(std::max<uint64_t>(segs[i], 1));
    return ratio > kRetransRatio && rto[i] > 0;
  };
  auto now = SchedClock::now();
  auto detect = std::chrono::duration_cast<std::chrono::nanoseconds>(policy_.health.interval *
                                                                     policy_.health.multiplier);
  for (size_t i = 0; i < R; ++i) {
    if (!bad(i)) continue;
    // A rail that just took over a failed rail's flows retransmits what the
    // failed rail lost: no evidence against it until that has settled.
    if (i < settle_until_.size() && now < settle_until_[i]) continue;
    // A full rail drops and retransmits because it is full, not because it
    // is failing; its flows are cwnd-limited and still deliver. (A blackholed
    // rail's transmit rate collapses, and its utilisation with it.)
    if (i < measures_.size() && measures_[i].utilisation() >= kBusy) continue;
    // evidence against one rail only, and never against the last good one
    bool others_clean = true, other_up = false;
    for (size_t j = 0; j < R; ++j) {
      if (j == i) continue;
      if (bad(j)) others_clean = false;
      if (rails_[j].health.state() == RailState::Up && !rail_vanished_[j]) other_up = true;
    }
    if (!others_clean || !other_up) continue;
    auto st = rails_[i].health.state();
    if (st != RailState::Up && st != RailState::Ramping) continue;
    rails_[i].health.evidence(
        fmt::format("data-path evidence: {} RTO{} and {} of {} segments retransmitted in {}",
                    rto[i], rto[i] == 1 ? "" : "s", retrans[i], segs[i],
                    format_duration(policy_.scheduler.tick)),
        detect, now);
  }
}

void Daemon::log_event(SchedulerEvent e) {
  events_.push_back({++event_seq_, std::chrono::system_clock::now(), std::move(e)});
  if (events_.size() > kMaxEvents) events_.pop_front();
}

// Health moved: record it, then decisions (every packet sees them at once),
// then routing.
void Daemon::health_changed() {
  const size_t R = rails_.size(), C = policy_.classes.size();
  for (size_t i = 0; i < R; ++i) {
    for (auto& ev : rails_[i].health.take_events()) {
      const auto& name = policy_.paths[i].name;
      auto level = ev.to == RailState::Down ? spdlog::level::warn : spdlog::level::info;
      spdlog::log(level, "path {}: {} -> {}: {}", name, to_string(ev.from), to_string(ev.to),
                  ev.reason);
      bool was_carrying = ev.from == RailState::Up || ev.from == RailState::Suspect;
      bool now_zero =
          ev.to == RailState::Down || ev.to == RailState::Holddown || ev.to == RailState::Drained;
      if (was_carrying && now_zero)
        for (size_t c = 0; c < C && c < sched_.classes.size(); ++c)
          former_[i][c] = i < sched_.classes[c].shares.size()
                              ? sched_.classes[c].shares[i] / double(DP_SHARE_SCALE)
                              : 0;
      if (ev.from == RailState::Ramping && ev.to == RailState::Up) {
        // failback complete: the scheduler takes over from the former shares
        for (size_t c = 0; c < C && c < sched_.classes.size(); ++c) {
          auto& sh = sched_.classes[c].shares;
          if (former_[i][c] > 0 && i < sh.size()) sh = restore_share(sh, i, former_[i][c]);
        }
      }
      if (was_carrying && now_zero) {
        auto settle = ev.t + std::chrono::duration_cast<SchedClock::duration>(
                                 policy_.health.interval * policy_.health.multiplier);
        settle_until_.resize(R);
        for (size_t j = 0; j < R; ++j)
          if (j != i) settle_until_[j] = std::max(settle_until_[j], settle);
      }
      SchedulerEvent e;
      e.t = ev.t;
      e.path = name;
      e.kind = "health";
      e.reason =
          fmt::format("{} {} -> {}: {}", name, to_string(ev.from), to_string(ev.to), ev.reason);
      log_event(std::move(e));
    }
  }
  write_effective();

  // routing: around every rail without a weight, while some rail has one
  std::vector<bool> failed(R, false);
  bool any_up = false;
  for (size_t i = 0; i < R; ++i) {
    failed[i] = rails_[i].health.weight() == 0;
    any_up = any_up || !failed[i];
  }
  bool any_alive =
      std::any_of(rails_.begin(), rails_.end(), [](auto& r) { return r.health.alive(); });
  if (!any_up && any_alive) {
    // no rail has a weight but some forward (a hold-down with no alternative)
    for (size_t i = 0; i < R; ++i) failed[i] = !rails_[i].health.alive();
    any_up = true;
  }
  if (!any_up) {
    if (!all_down_) {
      spdlog::critical(
          "every path of node {} is down: keeping the last decisions and routing until one "
          "returns",
          policy_.node);
      SchedulerEvent e;
      e.t = SchedClock::now();
      e.kind = "health";
      e.reason = "every path is down: the last decisions and routing stay";
      log_event(std::move(e));
    }
    all_down_ = true;
    return;
  }
  all_down_ = false;
  if (failed != routed_failed_) {
    auto r = Routing::apply(policy_, failed);
    if (!r) {
      spdlog::error("rewriting policy routing for failover failed: {}", r.error().what());
      return;  // tried again on the next change or tick
    }
    std::string around;
    for (size_t i = 0; i < R; ++i)
      if (failed[i]) around += (around.empty() ? "" : ", ") + policy_.paths[i].name;
    spdlog::info("policy routing {}: {} added, {} removed",
                 around.empty() ? "restored" : "around " + around, r->added, r->removed);
    routed_failed_ = failed;
  }
}

// Rails that carry traffic: those with a weight, or, when none has one, those
// that forward at all (a hold-down with no alternative; apply_health).
size_t Daemon::paths_carrying() const {
  size_t weighted = 0, alive = 0;
  for (size_t i = 0; i < rails_.size(); ++i) {
    bool gone = i < rail_vanished_.size() && rail_vanished_[i];
    weighted += !gone && rails_[i].health.weight() > 0;
    alive += !gone && rails_[i].health.alive();
  }
  return weighted ? weighted : alive;
}

// The scheduler's shares, reshaped by health, into the decision map; only
// what changed is written.
void Daemon::write_effective() {
  const size_t R = policy_.paths.size(), C = policy_.classes.size();
  if (rails_.size() != R || sched_.classes.size() != C) return;
  std::vector<RailView> views(R);
  for (size_t r = 0; r < R; ++r) {
    const auto& h = rails_[r].health;
    views[r] = {rail_vanished_[r] ? 0 : h.weight(), h.latency_ok(), h.alive() && !rail_vanished_[r],
                static_cast<double>(policy_.paths[r].capacity_bps)};
  }
  for (size_t c = 0; c < C; ++c) {
    std::vector<double> former(R);
    for (size_t r = 0; r < R; ++r) former[r] = former_[r][c];
    auto eff = apply_health(sched_.classes[c].shares, former, views,
                            policy_.classes[c].kind == ClassKind::LatencySensitive);
    if (!eff || *eff == written_[c]) continue;
    auto w = write_shares(c, *eff);
    if (!w) {
      spdlog::error("writing the decision of {} failed: {}", policy_.classes[c].name,
                    w.error().what());
      continue;
    }
    if (!written_[c].empty() && *eff != sched_.classes[c].shares) {
      SchedulerEvent e;
      e.t = SchedClock::now();
      e.klass = policy_.classes[c].name;
      e.before = written_[c];
      e.after = *eff;
      e.kind = "health";
      e.reason = fmt::format("{}: {} -> {} by path health", e.klass,
                             format_shares(policy_, e.before), format_shares(policy_, e.after));
      spdlog::info("{}", e.reason);
      ++switches_[{e.klass, e.kind}];
      log_event(std::move(e));
    }
    written_[c] = *eff;
  }
}

json Daemon::health_json(size_t i) const {
  if (i >= rails_.size()) return nullptr;
  const Rail& r = rails_[i];
  const auto& h = r.health;
  auto ago = std::chrono::duration<double>(SchedClock::now() - h.since()).count();
  auto wall = std::chrono::system_clock::now() -
              std::chrono::duration_cast<std::chrono::system_clock::duration>(SchedClock::now() -
                                                                              h.since());
  json j = {{"state", to_string(h.state())},
            {"since", fmt::format("{:%Y-%m-%dT%H:%M:%S}",
                                  fmt::localtime(std::chrono::system_clock::to_time_t(wall)))},
            {"seconds", ago},
            {"reason", h.reason()},
            {"weight", h.weight()},
            {"failures", h.failures()},
            {"bfd", nullptr}};
  if (r.bfd) {
    const auto& s = *r.bfd;
    j["bfd"] = {
        {"peer", r.io ? r.io->peer().str() : ""},
        {"state", bfd::to_string(s.state())},
        {"remote_state", bfd::to_string(s.remote_state())},
        {"diag", bfd::to_string(s.diag())},
        {"local_discriminator", s.local_disc()},
        {"remote_discriminator", s.remote_disc()},
        {"tx_interval_ms", std::chrono::duration<double, std::milli>(s.tx_interval()).count()},
        {"detection_ms", std::chrono::duration<double, std::milli>(s.detection_time()).count()},
        {"rx", s.rx_packets()},
        {"tx", s.tx_packets()},
        {"discarded", r.bfd_discarded}};
  }
  return j;
}

json Daemon::drain(const std::string& path, bool on) {
  int i = policy_.path_index(path);
  if (i < 0) return reply_error("not_found", fmt::format("no path named \"{}\"", path));
  auto idx = static_cast<size_t>(i);
  if (on) {
    size_t carrying = 0;
    for (size_t r = 0; r < rails_.size(); ++r)
      carrying += r != idx && rails_[r].health.weight() > 0;
    if (!carrying)
      return reply_error("invalid", fmt::format("{} is the only path carrying traffic; draining it "
                                                "would leave none",
                                                path));
  }
  rails_[idx].health.drain(on, SchedClock::now());
  spdlog::info("path {} {} by operator", path, on ? "drained" : "undrained");
  health_changed();
  return reply_ok({{"path", path}, {"health", health_json(idx)}});
}

}  // namespace dp
