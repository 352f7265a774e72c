// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/multipath.h"

#include <sys/socket.h>

#include <algorithm>

#include "dualpath/abi.h"

namespace dp::multipath {

namespace {

constexpr auto kYoung = std::chrono::seconds(1);
constexpr auto kYoungRetry = std::chrono::milliseconds(100);

const std::optional<IpAddr>& source_of(const PathSpec& ps, int family) {
  return family == AF_INET6 ? ps.source6 : ps.source;
}

std::optional<Prefix> network_of(const PathSpec& ps, int family) {
  return family == AF_INET6 ? ps.network6() : ps.network();
}

}  // namespace

size_t path_of(const Policy& p, const std::vector<uint32_t>& ifindex, const IpAddr& local,
               int bound_ifindex) {
  if (bound_ifindex > 0)
    for (size_t i = 0; i < ifindex.size() && i < p.paths.size(); ++i)
      if (ifindex[i] == static_cast<uint32_t>(bound_ifindex)) return i;
  if (p.topology != Topology::Separate) return kNoPath;  // one address on every rail
  for (size_t i = 0; i < p.paths.size(); ++i)
    if (source_of(p.paths[i], local.family) == local) return i;
  return kNoPath;
}

std::optional<IpAddr> peer_on_path(const Policy& p, const IpAddr& peer, size_t to) {
  if (to >= p.paths.size()) return std::nullopt;
  if (p.topology != Topology::Separate) return peer;
  // a peer the policy's table holds: its address there, or none
  if (const PeerSpec* pe = p.peer_of(peer)) {
    const auto& list = peer.family == AF_INET ? pe->addr4 : pe->addr6;
    if (to < list.size() && list[to]) return *list[to];
    return std::nullopt;
  }
  auto dst = network_of(p.paths[to], peer.family);
  if (!dst) return std::nullopt;
  for (const auto& ps : p.paths) {
    auto from = network_of(ps, peer.family);
    if (!from || !from->contains(peer)) continue;
    size_t n = peer.family == AF_INET ? 4 : 16;
    IpAddr out = dst->addr;
    for (size_t b = 0; b < n; ++b) {
      int bits = std::clamp(from->len - static_cast<int>(b) * 8, 0, 8);
      auto from_mask = static_cast<uint8_t>(bits ? 0xff << (8 - bits) : 0);
      int dbits = std::clamp(dst->len - static_cast<int>(b) * 8, 0, 8);
      auto dst_mask = static_cast<uint8_t>(dbits ? 0xff << (8 - dbits) : 0);
      uint8_t host = peer.bytes[b] & static_cast<uint8_t>(~from_mask);
      if (host & dst_mask) return std::nullopt;  // the host part does not fit
      out.bytes[b] = static_cast<uint8_t>((dst->addr.bytes[b] & dst_mask) | host);
    }
    return out;
  }
  return std::nullopt;
}

std::vector<bool> active_rails(const Policy& p, size_t klass, const std::vector<uint16_t>& shares,
                               const std::vector<bool>& usable, bool operator_pinned) {
  const size_t P = p.paths.size();
  std::vector<bool> a(P, false);
  double widest = 0;
  for (size_t i = 0; i < P && i < shares.size(); ++i)
    if (shares[i] > 0) {
      a[i] = true;
      widest = std::max(widest, static_cast<double>(p.paths[i].capacity_bps));
    }
  const ClassSpec& c = p.classes.at(klass);
  if (c.kind != ClassKind::Elastic || c.pinned || operator_pinned || widest == 0) return a;
  for (size_t i = 0; i < P && i < usable.size(); ++i) {
    const double cap = static_cast<double>(p.paths[i].capacity_bps);
    if (usable[i] && cap >= kComparable * widest) a[i] = true;
  }
  return a;
}

std::vector<uint16_t> subflow_shares(const Policy& p, const std::vector<bool>& active,
                                     const std::vector<uint16_t>& decided) {
  const size_t P = p.paths.size();
  bool wider = false;
  double total = 0;
  for (size_t i = 0; i < P && i < active.size(); ++i) {
    if (!active[i]) continue;
    wider |= i >= decided.size() || decided[i] == 0;
    total += static_cast<double>(p.paths[i].capacity_bps);
  }
  if (!wider || total <= 0) return decided;
  std::vector<uint16_t> out(P, 0);
  uint32_t given = 0;
  size_t widest = P;
  for (size_t i = 0; i < P && i < active.size(); ++i) {
    if (!active[i]) continue;
    out[i] = static_cast<uint16_t>(static_cast<double>(p.paths[i].capacity_bps) / total *
                                   DP_SHARE_SCALE);
    given += out[i];
    if (widest == P || p.paths[i].capacity_bps > p.paths[widest].capacity_bps) widest = i;
  }
  out[widest] = static_cast<uint16_t>(out[widest] + (DP_SHARE_SCALE - given));  // rounding
  return out;
}

std::vector<Action> reconcile(const Policy& p, const Connection& c, const Want& w, Time now) {
  std::vector<Action> out;
  size_t n = p.paths.size();
  auto usable = [&](size_t i) { return i < w.usable.size() && w.usable[i]; };
  const std::vector<bool>* act = c.klass < w.active.size() ? &w.active[c.klass] : nullptr;
  bool any_active = false;
  for (size_t i = 0; i < n; ++i) any_active |= usable(i) && act && i < act->size() && (*act)[i];
  auto active = [&](size_t i) {
    return usable(i) && (!any_active || (act && i < act->size() && (*act)[i]));
  };
  std::vector<bool> have(n, false);
  // the connecting side sets the roles (its MP_PRIO holds for both
  // directions); the accepting side only removes a failed rail's subflows
  const bool roles = !c.server_side;
  // the connection's first subflow (its ends may be v4-mapped, c.first's are not)
  auto is_first = [&](const Subflow& s) {
    return s.ends.lport == c.first.lport && s.ends.rport == c.first.rport &&
           s.ends.local.unmapped() == c.first.local && s.ends.remote.unmapped() == c.first.remote;
  };
  size_t first_path = kNoPath;
  for (const auto& s : c.subflows)
    if (is_first(s)) first_path = s.path;
  // a subflow too young to be made active (kJoinSettle); Time{}: not known
  auto settling = [&](const Subflow& s) { return s.up != Time{} && now - s.up < kJoinSettle; };
  // until every rail that is to carry has a subflow old enough to, none is
  // made a backup: with every subflow a backup, the scheduler sends on any
  // of them, a young join too
  bool holding = false;
  for (size_t i = 0; i < n && roles; ++i)
    holding |= usable(i) && active(i) &&
               std::none_of(c.subflows.begin(), c.subflows.end(),
                            [&](const Subflow& s) { return s.path == i && !settling(s); });
  for (const auto& s : c.subflows) {
    if (s.path == kNoPath) {
      if (!roles) continue;
      // the shared topology's first subflow goes where the datapath steers
      // the class; the bound ones carry the roles, so it stands by
      if (!s.backup && !holding && p.topology != Topology::Separate &&
          std::any_of(c.subflows.begin(), c.subflows.end(),
                      [](const Subflow& o) { return o.path != kNoPath; }))
        out.push_back({Action::Kind::SetBackup, s.path, true, s.ends});
      continue;
    }
    if (s.path >= n) continue;
    if (!usable(s.path)) {
      out.push_back({Action::Kind::Destroy, s.path, s.backup, s.ends});
      continue;
    }
    // a second subflow on a rail: a join asked for again while the first
    // request was still under way (its SYN lost, then retransmitted), and
    // both came up. The later one goes; the connection's first never does.
    if (roles && !is_first(s) && (have[s.path] || s.path == first_path)) {
      out.push_back({Action::Kind::Destroy, s.path, s.backup, s.ends});
      continue;
    }
    have[s.path] = true;
    bool backup = !active(s.path);
    if (roles && s.backup != backup && !(backup ? holding : settling(s)))
      out.push_back({Action::Kind::SetBackup, s.path, backup, s.ends});
  }
  if (c.server_side) return out;
  for (size_t i = 0; i < n; ++i) {
    if (have[i] || !usable(i)) continue;
    if (i < c.retry_after.size() && now < c.retry_after[i]) continue;
    if (i < c.joining.size() && c.joining[i] != Time{}) continue;  // one is under way
    const auto& src = source_of(p.paths[i], c.first.remote.family);
    auto peer = peer_on_path(p, c.first.remote, i);
    if (!src || !peer) continue;
    Action a{Action::Kind::Create, i, true, {}};  // active after kJoinSettle
    a.ends.local = *src;
    a.ends.remote = *peer;
    a.ends.rport = c.first.rport;
    out.push_back(a);
  }
  return out;
}

namespace {

// The next try on `path` after a failure: 1 s, doubling up to 8 s.
void back_off(Connection& c, size_t path, Time now) {
  if (c.failures.size() <= path) c.failures.resize(path + 1, 0);
  if (c.retry_after.size() <= path) c.retry_after.resize(path + 1, Time{});
  int f = std::min(++c.failures[path], 6);
  Time::duration wait = std::min(std::chrono::seconds(1) * (1 << (f - 1)), std::chrono::seconds(8));
  // a join refused in the connection's first second most likely overtook
  // the first subflow's handshake at the peer (sent on another rail, it
  // found no connection there): the first time, it is tried again soon
  if (f == 1 && c.since != Time{} && now - c.since < kYoung) wait = kYoungRetry;
  c.retry_after[path] = now + wait;
}

}  // namespace

bool note_failure(Connection& c, size_t path, Time now) {
  if (path == kNoPath) return false;
  back_off(c, path, now);
  if (c.refused.size() <= path) c.refused.resize(path + 1, 0);
  if (++c.refused[path] < kGiveUpAfter) return false;
  c.retry_after[path] = now + kGiveUpFor;
  return c.refused[path] == kGiveUpAfter;
}

void note_asked(Connection& c, size_t path, Time now) {
  if (path == kNoPath) return;
  if (c.joining.size() <= path) c.joining.resize(path + 1, Time{});
  c.joining[path] = now;
}

void note_answered(Connection& c, size_t path) {
  if (path < c.joining.size()) c.joining[path] = Time{};
}

std::vector<size_t> overdue_joins(const Connection& c, Time now) {
  std::vector<size_t> out;
  for (size_t i = 0; i < c.joining.size(); ++i)
    if (c.joining[i] != Time{} && now - c.joining[i] >= kJoinTimeout) out.push_back(i);
  return out;
}

void note_removed(Connection& c, size_t path, Time up, Time now) {
  if (path == kNoPath || up == Time{}) return;
  if (path < c.refused.size()) c.refused[path] = 0;  // it was made: joins get through
  if (now - up >= kLived && path < c.failures.size()) c.failures[path] = 0;
}

bool note_closed(Connection& c, size_t path, Time up, Time now) {
  if (path == kNoPath) return false;
  if (up == Time{}) return note_failure(c, path, now);  // never made
  note_removed(c, path, up, now);
  back_off(c, path, now);
  return false;
}

}  // namespace dp::multipath
