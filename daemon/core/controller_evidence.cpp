// SPDX-License-Identifier: Apache-2.0
// Controller: what the data path and the peer's traffic say about a rail.
// Evidence from the rails' TCP counters and the classes' arrivals suspects a
// failing rail before BFD can tell; the same arrivals tell a BFD session that
// expired because the peer's speaker stopped from a rail that stopped
// forwarding.
#include "dualpath/core/controller.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "dualpath/core/units.h"

namespace dp {

namespace {

// Data-path evidence: a rail is suspect when, within one tick, its flows had
// an RTO and retransmitted more than kRetransRatio of the segments they sent,
// while no other rail's flows did the same. An RTO is required: fast
// retransmits alone are what a congested rail does (the lab's spill test
// suspected a saturated rail0 on them), while a blackhole or heavy loss ends
// in RTOs.
constexpr double kRetransRatio = 0.10;
// A busy rail (smoothed utilisation at or above kBusy) that retransmits is
// congested, not failing, as long as its flows still deliver: their
// acknowledgements (sockops RTT samples, one per ACK of new data) in the tick
// are at least kStillDelivering of the rate they had in the rail's clean
// ticks. What a rail sends says nothing here: a blackholed rail's senders keep
// its smoothed utilisation high for seconds, but nothing it sends is
// acknowledged, and heavy loss cuts its deliveries many times over.
constexpr double kBusy = 0.80;
constexpr double kStillDelivering = 0.25;
// An RTO of a rail whose inbound traffic arrives at kBusy of its capacity or
// more, in a tick in which its flows' data was also acknowledged, is the
// peer's queue, not a failure: the ACKs for this end's data leave the peer
// behind that line-rate traffic, and a class with a short rto_min (10 ms for
// latency-sensitive ones) times out before they come. A rail that failed both
// ways delivers nothing inbound, heavy loss cuts the peer's rate far below
// line rate, and a rail whose outbound failed acknowledges nothing (the peer
// moves off it, and the receiver's evidence below follows).
constexpr double kInboundFull = kBusy;
constexpr double kAckRateWeight = 0.2;  // EWMA of a rail's acknowledgement rate in clean ticks
// The peer moved a class off a rail and cannot get on with it: in one tick,
// what arrived of the class on the rail fell to at most kRxCollapsed of its
// usual rate (at least kMinRxRate bytes per second), while on another rail,
// where it did not arrive before, it arrived at a trickle (something, under
// kTrickle of that usual rate or of the other rail's capacity, whichever is
// less: a rail of a quarter the capacity carries a quarter of the class at
// full speed). That is the peer retransmitting on the other
// rail after its RTOs, without this end's ACKs, which still leave on the
// failed rail: a receiver's flows never retransmit, so they have no RTOs to
// tell it. A move the peer made for its own reasons (latency, spill, return)
// arrives at the class's full rate, and traffic that stopped arrives nowhere,
// or almost: a conversation that ends on one rail may send its last bare
// ACKs or FIN over the other (a flowlet placed anew after an idle gap), which
// looks like a move. So a move needs kMovedBytes to arrive on the other rail,
// in the tick or within kMoveConfirm of the first arrival while the class
// stays collapsed where it was: a retransmitted data segment is that much (a
// sender retransmits a stalled window's head, small writes collapsed into
// one segment), the end of a conversation is a few bare packets.
constexpr double kRxCollapsed = 0.05;
constexpr double kMinRxRate = 125e3;  // 1 Mbit/s
constexpr double kTrickle = 0.25;
constexpr double kRxRateWeight = 0.2;
constexpr uint64_t kMovedBytes = 1200;
constexpr auto kMoveConfirm = std::chrono::milliseconds(500);

}  // namespace

void Controller::bfd(size_t path, bfd::State s, bfd::Diag diag, bool peer_admin_down, Time now) {
  if (path >= paths_.size()) return;
  auto& h = paths_[path].health;
  // The session went down (expired, or the peer's fresh session said Down)
  // while the peer's traffic still arrives on the rail at a rate: the rail
  // forwards toward us, and what stopped is the peer's BFD speaker (its
  // daemon killed or restarted, which takes every rail's session down at
  // once). Not a forwarding failure: data-path evidence still judges the
  // rail, and catches a rail that fails only the other way within its RTOs
  // (a TCP peer's traffic collapses then, before BFD's detection time).
  if (s == bfd::State::Down && !peer_admin_down && h.bfd_in_use()) {
    double inbound = 0;
    for (const auto& by_path : rx_rate_)
      if (path < by_path.size()) inbound += by_path[path];
    if (inbound >= kMinRxRate) {
      h.bfd_speaker_gone(fmt::format("BFD expired while the peer's traffic still arrives on it "
                                     "({}/s): the peer's BFD stopped, not the rail",
                                     format_bandwidth(inbound * 8)),
                         now);
      return;
    }
  }
  h.bfd(s, diag, peer_admin_down, now);
}

// The session went down because the peer's session started afresh (its
// daemon killed and started again, or upgraded without a goodbye): the Down
// came over the rail, so the rail forwards toward us. Not a forwarding
// failure, however little traffic the rail carries: the rail is judged as
// one without a session until the new one comes up (a rail that forwards
// only toward us keeps it from coming up), and data-path evidence judges
// it meanwhile.
void Controller::bfd_peer_restarted(size_t path, Time now) {
  if (path >= paths_.size()) return;
  paths_[path].health.bfd_speaker_gone(
      "the peer's BFD session started afresh (a new discriminator, and its Down came over "
      "the rail): the peer's daemon restarted, not the rail",
      now);
}

// One tick of data-path evidence: the rails' TCP counters and the classes'
// arrivals since the tick before, and what they say about each rail. A
// nested class, so that its steps read and update the controller's
// per-rail state directly; check_evidence() runs them in order.
struct Controller::Evidence {
  // a class the peer moved off a rail without getting on with it: the
  // class, where it went and the bytes that arrived there (in this tick, or
  // since a smaller arrival began to wait for more)
  struct Moved {
    size_t klass, to;
    uint64_t bytes;
  };

  Controller& ctl;
  const TickInput& in;
  size_t R;
  std::vector<uint64_t> rto, retrans, segs, acks;  // per rail, in the tick
  std::vector<double> dt;                          // per rail: seconds since its last reading
  std::vector<std::vector<uint64_t>> rx_now;       // per class, per rail: bytes that arrived
  std::vector<std::optional<Moved>> moved;         // per rail
  // was_bad: looked bad; failing: looked bad and is not explained by
  // congestion or the peer's queue (what keeps the other rails' evidence from
  // being judged in the same tick, since it may be the node's trouble)
  std::vector<bool> was_bad, failing;

  Evidence(Controller& c, const TickInput& i)
      : ctl(c),
        in(i),
        R(c.paths_.size()),
        rto(R),
        retrans(R),
        segs(R),
        acks(R),
        dt(R, 0),
        moved(R),
        was_bad(R),
        failing(R) {}

  void read_counters();
  void find_moves();
  void find_move(size_t i);
  void judge();
  std::optional<std::string> against(size_t i);
  void learn_rates();

  // An RTO counts when it is a large part of what the rail sent in the tick
  // (a blackhole: flows send almost nothing but their retransmissions), not
  // the odd tail-loss RTO of a busy rail with 1% loss.
  bool bad(size_t i) const {
    double ratio =
        static_cast<double>(retrans[i]) / static_cast<double>(std::max<uint64_t>(segs[i], 1));
    return ratio > kRetransRatio && rto[i] > 0;
  }
  double ack_rate(size_t i) const { return dt[i] > 0 ? static_cast<double>(acks[i]) / dt[i] : 0.0; }
  // what the peer sends on rail j when it moved there without an answer
  double trickle(size_t j, double of) const {
    return kTrickle * std::min(of, static_cast<double>(ctl.policy_.paths.at(j).capacity_bps) / 8);
  }
  // A peer that moved off rail i because it fails there moved everything it
  // could, and what it could not move stalls: the rail's whole inbound
  // collapses. A rail that still brings other classes in at their usual
  // rate only saw one class go elsewhere (its next burst placed on the
  // other rail, say), which explains the class's arrivals there.
  bool inbound_collapsed(size_t i) const {
    double usual = 0, here = 0;
    for (size_t c = 0; c < rx_now.size(); ++c) {
      usual += ctl.rx_rate_[c][i];
      here += static_cast<double>(rx_now[c][i]) / dt[i];
    }
    return here <= kRxCollapsed * usual;
  }
  // Congestion, not failure: busy, and delivering about as it did when clean.
  bool congested(size_t i) const {
    if (in.rails[i].utilisation < kBusy || acks[i] == 0) return false;
    return ack_rate(i) >= kStillDelivering * ctl.paths_[i].clean_ack_rate;
  }
  // The peer's queue, not failure: the rail's inbound at line rate, and this
  // end's data acknowledged (kInboundFull).
  bool inbound_full(size_t i) const {
    const double cap = static_cast<double>(ctl.policy_.paths.at(i).capacity_bps);
    if (acks[i] == 0 || dt[i] <= 0 || cap <= 0) return false;
    uint64_t bytes = 0;
    for (size_t c = 0; c < rx_now.size(); ++c) bytes += rx_now[c][i];
    return static_cast<double>(bytes) * 8 / dt[i] >= kInboundFull * cap;
  }
};

// The rails' TCP counters and the classes' arrivals since the last tick; the
// readings are kept for the next one.
void Controller::Evidence::read_counters() {
  auto& paths = ctl.paths_;
  for (size_t i = 0; i < R; ++i) {
    const TcpCounters& now = in.rails[i].tcp;
    auto& prev = paths[i].tcp_prev;
    rto[i] = now.rto_events - std::min(prev.rto_events, now.rto_events);
    retrans[i] = now.retrans_segs - std::min(prev.retrans_segs, now.retrans_segs);
    segs[i] = now.segs_out - std::min(prev.segs_out, now.segs_out);
    acks[i] = now.rtt_samples - std::min(prev.rtt_samples, now.rtt_samples);
    if (paths[i].tcp_at != Time{} && in.now > paths[i].tcp_at)
      dt[i] = std::chrono::duration<double>(in.now - paths[i].tcp_at).count();
    prev = now;
    paths[i].tcp_at = in.now;
  }
  // per class, per rail: bytes that arrived in the tick
  const size_t C = std::min(ctl.rx_prev_.size(), in.class_path_rx_bytes.size());
  rx_now.assign(C, std::vector<uint64_t>(R, 0));
  for (size_t c = 0; c < C; ++c)
    for (size_t i = 0; i < R && i < in.class_path_rx_bytes[c].size(); ++i) {
      uint64_t v = in.class_path_rx_bytes[c][i];
      rx_now[c][i] = ctl.rx_primed_ ? v - std::min(ctl.rx_prev_[c][i], v) : 0;
      ctl.rx_prev_[c][i] = v;
    }
  ctl.rx_primed_ = true;
}

void Controller::Evidence::find_moves() {
  for (size_t i = 0; i < R; ++i) {
    if (dt[i] <= 0) continue;
    find_move(i);
  }
}

// A class the peer moved off rail i without getting on with it (see
// kRxCollapsed): confirmed at once when enough arrived on the other rail, or
// over the ticks of kMoveConfirm when a smaller arrival waits for more.
void Controller::Evidence::find_move(size_t i) {
  if (!inbound_collapsed(i)) {
    for (auto& by_path : ctl.move_seen_) by_path[i].reset();
    return;
  }
  for (size_t c = 0; c < rx_now.size() && !moved[i]; ++c) {
    double usual = ctl.rx_rate_[c][i], here = static_cast<double>(rx_now[c][i]) / dt[i];
    auto& seen = ctl.move_seen_[c][i];
    if (seen) {
      if (in.now - seen->at > kMoveConfirm || here > kRxCollapsed * seen->usual ||
          static_cast<double>(rx_now[c][seen->to]) / dt[i] >= trickle(seen->to, seen->usual)) {
        seen.reset();  // too little in time, back where it was, or a move at full rate
      } else {
        seen->bytes += rx_now[c][seen->to];
        if (seen->bytes >= kMovedBytes) moved[i] = Moved{c, seen->to, seen->bytes};
        if (moved[i]) seen.reset();
        continue;
      }
    }
    if (usual < kMinRxRate || here > kRxCollapsed * usual) continue;
    for (size_t j = 0; j < R && !moved[i]; ++j) {
      if (j == i || rx_now[c][j] == 0 || ctl.rx_rate_[c][j] > kRxCollapsed * usual ||
          static_cast<double>(rx_now[c][j]) / dt[i] >= trickle(j, usual))
        continue;
      if (rx_now[c][j] >= kMovedBytes)
        moved[i] = Moved{c, j, rx_now[c][j]};
      else if (!seen)
        seen = MoveSeen{in.now, j, usual, rx_now[c][j]};
    }
  }
}

// The evidence against rail i in this tick, in words: its RTOs and
// retransmits unless congestion or the peer's queue explains them (counted
// as discounted then), or a class the peer moved off it; none otherwise.
std::optional<std::string> Controller::Evidence::against(size_t i) {
  const auto& policy = ctl.policy_;
  auto& path = ctl.paths_[i];
  bool judged = was_bad[i] && in.now >= path.settle_until;
  if (judged && congested(i)) {
    ++path.discounted.congested;
    judged = false;
  } else if (judged && inbound_full(i)) {
    ++path.discounted.peer_queue;
    judged = false;
  }
  if (judged) {
    // (a rail that just took over a failed rail's flows retransmits what
    // the failed rail lost: no evidence against it until that has settled)
    // (segments sent are counted at ACKs: a rail that acknowledges nothing
    // shows fewer sent than retransmitted, and then only the latter reads)
    const std::string of = segs[i] >= retrans[i] ? fmt::format(" of {}", segs[i]) : std::string();
    return fmt::format("{} RTO{} and {}{} segment{} retransmitted in {}, {} acknowledged", rto[i],
                       rto[i] == 1 ? "" : "s", retrans[i], of,
                       retrans[i] == 1 && of.empty() ? "" : "s",
                       format_duration(policy.scheduler.tick), acks[i]);
  }
  if (moved[i]) {
    auto [c, j, bytes] = *moved[i];
    return fmt::format(
        "{} bytes of {} arrived in {} (usually {:.0f}/s), {} on {}: the peer moved it off "
        "and gets no answer",
        rx_now[c][i], policy.classes.at(c).name, format_duration(policy.scheduler.tick),
        ctl.rx_rate_[c][i], bytes, policy.paths.at(j).name);
  }
  return std::nullopt;
}

// Suspects each rail with evidence against it, as long as the evidence is
// against that rail only and another rail is up to take its traffic.
void Controller::Evidence::judge() {
  auto& paths = ctl.paths_;
  auto detect = std::chrono::duration_cast<std::chrono::nanoseconds>(ctl.policy_.health.interval *
                                                                     ctl.policy_.health.multiplier);
  for (size_t i = 0; i < R; ++i) {
    was_bad[i] = bad(i);
    failing[i] = was_bad[i] && !congested(i) && !inbound_full(i);
  }
  for (size_t i = 0; i < R; ++i) {
    auto why = against(i);
    if (!why) continue;
    // evidence against one rail only, and never against the last good one
    bool others_clean = true, other_up = false;
    for (size_t j = 0; j < R; ++j) {
      if (j == i) continue;
      if (failing[j]) others_clean = false;
      if (paths[j].health.state() == RailState::Up && paths[j].present) other_up = true;
    }
    if (!others_clean || !other_up) continue;
    auto st = paths[i].health.state();
    if (st != RailState::Up && st != RailState::Ramping) continue;
    paths[i].health.evidence("data-path evidence: " + *why, detect, in.now);
  }
}

// The rate a rail's flows are acknowledged at when nothing is wrong: what a
// busy rail's deliveries are judged against.
void Controller::Evidence::learn_rates() {
  for (size_t i = 0; i < R; ++i) {
    if (dt[i] <= 0) continue;
    // every tick, so that traffic that stopped is forgotten
    for (size_t c = 0; c < rx_now.size(); ++c)
      ctl.rx_rate_[c][i] +=
          kRxRateWeight * (static_cast<double>(rx_now[c][i]) / dt[i] - ctl.rx_rate_[c][i]);
    if (was_bad[i]) continue;
    double& usual = ctl.paths_[i].clean_ack_rate;
    usual = usual == 0 ? ack_rate(i) : usual + kAckRateWeight * (ack_rate(i) - usual);
  }
}

// A burst of retransmits or RTOs on one rail's flows while the others' are
// clean: suspect the rail before BFD can tell.
void Controller::check_evidence(const TickInput& in) {
  if (in.rails.size() != paths_.size()) return;
  Evidence e(*this, in);
  e.read_counters();
  e.find_moves();
  e.judge();
  e.learn_rates();
}

}  // namespace dp
