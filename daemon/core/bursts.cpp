// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/bursts.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace dp {

namespace {
// A flow moves only when its path would finish more than this much later
// than the best one: a burst plan that flips between two near-equal answers
// every tick would move flows for nothing.
constexpr double kKeepWithin = 1.05;
// A stream's rate is smoothed over about this long (seconds).
constexpr double kRateTau = 0.25;
// A class's streams move at most this often: what they carry after a move
// is measured before the next.
constexpr auto kStreamSettle = std::chrono::seconds(1);
// What a class's streams carry is judged against its decision this long
// after they last moved, and said to fall short past this many points.
constexpr auto kStreamJudged = std::chrono::seconds(3);
constexpr double kStreamTolerance = 0.05;

BurstSizes::Key key_of(const dp_flow_key& key) {
  BurstSizes::Key k;
  std::memcpy(k.data(), &key, sizeof(key));
  return k;
}

// Moves a class's streams until each path has the number it wants: the
// slowest streams of a path with too many move (the fewest bytes
// reordered), to the paths with too few, lowest first. `at` and `count`
// (where each stream is, how many each path has) are updated; true if any
// stream moved.
bool move_streams(const std::vector<StreamFlow>& streams, const std::vector<size_t>& members,
                  const std::vector<size_t>& want, std::vector<size_t>& at,
                  std::vector<size_t>& count) {
  const size_t P = count.size();
  bool moved = false;
  std::vector<size_t> order(members.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return streams[members[a]].bps < streams[members[b]].bps;
  });
  for (size_t m : order) {
    if (at[m] != BurstPlan::kNone && count[at[m]] <= want[at[m]]) continue;
    size_t to = BurstPlan::kNone;
    for (size_t p = 0; p < P && to == BurstPlan::kNone; ++p)
      if (count[p] < want[p]) to = p;
    if (to == BurstPlan::kNone) break;
    if (at[m] != BurstPlan::kNone) --count[at[m]];
    at[m] = to;
    ++count[to];
    moved = true;
  }
  return moved;
}

// What a class's streams carry by path (bits a second, where the datapath
// measured them), in all, and whether every stream is where it is planned.
struct StreamsCarried {
  std::vector<double> carried;
  double total = 0;
  bool in_place = true;
};

StreamsCarried streams_carried(const std::vector<StreamFlow>& streams,
                               const std::vector<size_t>& members, const std::vector<size_t>& at,
                               size_t P) {
  StreamsCarried out{std::vector<double>(P, 0), 0, true};
  for (size_t m = 0; m < members.size(); ++m) {
    const StreamFlow& f = streams[members[m]];
    out.in_place = out.in_place && f.path == at[m];
    if (f.path < P) out.carried[f.path] += f.bps, out.total += f.bps;
  }
  return out;
}

// The shortfall of class c when what its streams carry is off its decision
// `d` by more than kStreamTolerance on some path; none otherwise.
std::optional<StreamPlan::Shortfall> stream_shortfall(size_t c, size_t streams,
                                                      const StreamsCarried& sc,
                                                      const std::vector<uint16_t>& d) {
  const size_t P = d.size();
  const double scale = DP_SHARE_SCALE;
  const double sum = std::accumulate(d.begin(), d.end(), 0.0);
  bool off = false;
  StreamPlan::Shortfall s{c, streams, std::vector<uint16_t>(P, 0)};
  for (size_t p = 0; p < P; ++p) {
    s.carried[p] = static_cast<uint16_t>(std::lround(scale * sc.carried[p] / sc.total));
    off = off || std::abs(sc.carried[p] / sc.total - d[p] / sum) > kStreamTolerance;
  }
  if (!off) return std::nullopt;
  return s;
}

}  // namespace

BurstPlan plan_bursts(const std::vector<BurstFlow>& flows,
                      const std::vector<std::vector<bool>>& allowed,
                      const std::vector<int>& priority, const std::vector<double>& left_bps) {
  const size_t P = left_bps.size();
  BurstPlan out;
  out.path.assign(flows.size(), BurstPlan::kNone);
  out.finish_s.assign(P, 0);
  std::vector<size_t> order(flows.size());
  std::iota(order.begin(), order.end(), 0);
  auto prio = [&](size_t i) {
    return flows[i].klass < priority.size() ? priority[flows[i].klass] : 0;
  };
  // higher priority first; then largest first (LPT): the small bursts fill
  // in what the large ones leave
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (prio(a) != prio(b)) return prio(a) > prio(b);
    return flows[a].burst > flows[b].burst;
  });
  for (size_t i : order) {
    const BurstFlow& f = flows[i];
    if (f.klass >= allowed.size()) continue;
    size_t best = BurstPlan::kNone;
    double best_t = 0, here_t = -1;
    for (size_t p = 0; p < P; ++p) {
      if (p >= allowed[f.klass].size() || !allowed[f.klass][p] || left_bps[p] <= 0) continue;
      double t = out.finish_s[p] + static_cast<double>(f.burst) * 8 / left_bps[p];
      if (p == f.path) here_t = t;
      if (best == BurstPlan::kNone || t < best_t) best = p, best_t = t;
    }
    if (best == BurstPlan::kNone) continue;
    if (here_t >= 0 && here_t <= best_t * kKeepWithin) best = f.path, best_t = here_t;
    out.path[i] = best;
    out.finish_s[best] = best_t;
  }
  return out;
}

uint64_t BurstSizes::expect(const dp_flow_key& key, uint64_t measured, Clock::time_point now) {
  const auto bytes = static_cast<double>(measured);
  auto [it, fresh] = seen_.try_emplace(key_of(key), Seen{bytes, now});
  Seen& s = it->second;
  if (!fresh) {
    double aged = 0;
    if (half_life_.count() > 0)
      aged = s.bytes *
             std::exp2(-std::max(std::chrono::duration<double>(now - s.at) / half_life_, 0.0));
    s = {std::max(aged, bytes), now};
  }
  return static_cast<uint64_t>(s.bytes);
}

std::optional<uint64_t> BurstSizes::last(const dp_flow_key& key) const {
  auto it = seen_.find(key_of(key));
  if (it == seen_.end()) return std::nullopt;
  return static_cast<uint64_t>(it->second.bytes);
}

void BurstSizes::forget_idle(Clock::time_point now) {
  const auto idle = 16 * half_life_;
  std::erase_if(seen_, [&](const auto& e) { return now - e.second.at > idle; });
}

Streams::Sample Streams::observe(const dp_flow_key& key, uint32_t burst, uint64_t bytes,
                                 uint8_t flags, Clock::time_point now) {
  auto [it, fresh] = seen_.try_emplace(key_of(key), Seen{burst, bytes, now, now, now, 0});
  Seen& s = it->second;
  if (!fresh) {
    const double dt = std::chrono::duration<double>(now - s.at).count();
    if (dt > 0 && bytes >= s.bytes) {
      const double inst = static_cast<double>(bytes - s.bytes) * 8 / dt;
      s.bps += (inst - s.bps) * (1 - std::exp(-dt / kRateTau));
    }
    if (bytes != s.bytes) s.progress = now;
    // a gap ended a burst that fit its plan: bursts, not a stream (yet)
    if (burst != s.burst && !(flags & (DP_FLOW_F_OVERFLOW | DP_FLOW_F_STREAM))) s.since = now;
    s.burst = burst;
    s.bytes = bytes;
    s.at = now;
  }
  return {now - s.since >= kStreamAfter && now - s.progress < kStreamStalled, s.bps};
}

void Streams::forget_idle(Clock::time_point now) {
  std::erase_if(seen_, [&](const auto& e) { return now - e.second.at > std::chrono::seconds(2); });
}

std::vector<size_t> stream_counts(size_t n, const std::vector<uint16_t>& decided) {
  const size_t P = decided.size();
  std::vector<size_t> count(P, 0);
  const double total = std::accumulate(decided.begin(), decided.end(), 0.0);
  if (!n || total <= 0) return count;
  std::vector<double> rest(P, 0);
  size_t given = 0, open = 0;
  for (size_t p = 0; p < P; ++p) {
    const double want = static_cast<double>(n) * decided[p] / total;
    count[p] = static_cast<size_t>(want);
    rest[p] = want - static_cast<double>(count[p]);
    given += count[p];
    open += decided[p] > 0;
  }
  // the largest remainders (the larger share on a tie) take what is left
  std::vector<size_t> order(P);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rest[a] != rest[b] ? rest[a] > rest[b] : decided[a] > decided[b];
  });
  for (size_t i = 0; given < n && i < P; ++i)
    if (decided[order[i]] > 0) ++count[order[i]], ++given;
  // every open path carries one while there are enough, taken from the path
  // with the most
  if (n >= open)
    for (size_t p = 0; p < P; ++p) {
      if (!decided[p] || count[p]) continue;
      auto most = std::max_element(count.begin(), count.end()) - count.begin();
      --count[static_cast<size_t>(most)];
      ++count[p];
    }
  return count;
}

StreamPlan StreamPlanner::plan(const std::vector<StreamFlow>& streams,
                               const std::vector<std::vector<uint16_t>>& decided,
                               Clock::time_point now) {
  StreamPlan out;
  out.path.assign(streams.size(), BurstPlan::kNone);
  std::map<size_t, std::vector<size_t>> by_class;
  for (size_t i = 0; i < streams.size(); ++i)
    if (streams[i].klass < decided.size() && !decided[streams[i].klass].empty())
      by_class[streams[i].klass].push_back(i);
  std::map<BurstSizes::Key, size_t> planned;
  for (auto& entry : by_class) {
    // (not a structured binding: clang 14 does not let the lambdas below
    // capture one)
    const size_t c = entry.first;
    const std::vector<size_t>& members = entry.second;
    const auto& d = decided[c];
    const size_t P = d.size();
    auto [sit, fresh] = classes_.try_emplace(c);
    ClassState& st = sit->second;
    if (fresh) st.since = now;
    auto open = [&](size_t p) { return p < P && d[p] > 0; };
    // where each stream is: as planned, if that is still open; else as
    // measured; else nowhere yet
    std::vector<size_t> at(members.size(), BurstPlan::kNone);
    std::vector<size_t> count(P, 0);
    for (size_t m = 0; m < members.size(); ++m) {
      const StreamFlow& f = streams[members[m]];
      auto it = planned_.find(key_of(f.key));
      size_t p = it != planned_.end() && open(it->second) ? it->second : f.path;
      if (!open(p)) continue;
      at[m] = p;
      ++count[p];
    }
    const std::vector<size_t> want = stream_counts(members.size(), d);
    const bool settled = now - st.moved >= kStreamSettle;
    bool moved = false;
    if (settled && count != want) {
      moved = move_streams(streams, members, want, at, count);
      if (moved) st.moved = now;
    }
    // what the streams carry, by where the datapath measured them, once they
    // have been where they are planned for a while
    const StreamsCarried sc = streams_carried(streams, members, at, P);
    if (!moved && sc.in_place && now - st.moved >= kStreamJudged &&
        now - st.since >= kStreamJudged && sc.total > 0 && st.noted != d) {
      if (auto s = stream_shortfall(c, members.size(), sc, d)) {
        out.shortfalls.push_back(std::move(*s));
        st.noted = d;
      }
    }
    for (size_t m = 0; m < members.size(); ++m) {
      out.path[members[m]] = at[m];
      if (at[m] != BurstPlan::kNone) planned[key_of(streams[members[m]].key)] = at[m];
    }
  }
  planned_ = std::move(planned);  // streams no longer seen are forgotten
  std::erase_if(classes_, [&](const auto& e) { return !by_class.count(e.first); });
  return out;
}

}  // namespace dp
