#include "daemon.h"

#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/chrono.h>
#include <netlink/socket.h>
#include <spdlog/spdlog.h>

#include "dualpath/core/encode.h"
#include "dualpath/core/policy_diff.h"
#include "dualpath/core/units.h"
#include "dualpath/kernel/routing.h"
#include "dualpath/version.h"

namespace dp {

namespace {

constexpr uint32_t kOperatorPinned = 1u << 16;  // dp_decision.flags: pinned by dpctl

std::vector<std::string> read_names(const BpfMap& m, size_t n) {
  std::vector<std::string> out(n);
  for (uint32_t i = 0; i < n; ++i) {
    dp_slot_name v{};
    if (m.lookup(&i, &v)) out[i] = decode_name(v);
  }
  return out;
}

Result<void> write_ports(const BpfMap& m, uint32_t gen, const std::vector<dp_port_entry>& ports) {
  std::vector<uint32_t> keys(DP_PORT_SPACE);
  for (uint32_t i = 0; i < DP_PORT_SPACE; ++i) keys[i] = gen * DP_PORT_SPACE + i;
  uint32_t count = DP_PORT_SPACE;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  if (bpf_map_update_batch(m.fd(), keys.data(), ports.data(), &count, &opts) == 0) return {};
  for (uint32_t i = 0; i < DP_PORT_SPACE; ++i) DP_TRY(m.update(&keys[i], &ports[i]));
  return {};
}

Result<void> write_marks(const BpfMap& m, uint32_t gen,
                         const std::vector<std::pair<uint32_t, uint8_t>>& marks) {
  std::vector<dp_mark_key> stale;
  dp_mark_key k{}, next{};
  void* prev = nullptr;
  while (bpf_map_get_next_key(m.fd(), prev, &next) == 0) {
    if (next.gen == gen) stale.push_back(next);
    k = next;
    prev = &k;
  }
  for (auto& s : stale) DP_TRY(m.remove(&s));
  for (auto& [mark, cls] : marks) {
    dp_mark_key mk{gen, mark};
    dp_mark_val mv{cls, {}};
    DP_TRY(m.update(&mk, &mv));
  }
  return {};
}

}  // namespace

void warn_ephemeral_overlap(const Policy& p);

std::string Daemon::pin_dir(const std::string& bpffs_root, const std::string& node) {
  return (std::filesystem::path(bpffs_root) / "dualpath" / node).string();
}

Daemon::~Daemon() = default;

// ---------------------------------------------------------------- start / apply

namespace {
sigset_t daemon_signals() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
  return mask;
}
}  // namespace

Result<void> Daemon::start() {
  // Block the signals run() reads from a signalfd before any thread exists:
  // threads (the metrics HTTP server's) inherit the mask, and a thread that
  // did not block SIGHUP would take it and terminate the process.
  sigset_t mask = daemon_signals();
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  started_ = std::chrono::steady_clock::now();
  auto load = load_policy_file(opts_.policy_file);
  if (!load.ok()) {
    for (auto& e : load.errors) spdlog::error("{}", e.str());
    return DP_ERROR("policy {} is invalid ({} error{})", opts_.policy_file, load.errors.size(),
                    load.errors.size() == 1 ? "" : "s");
  }
  const Policy& p = *load.policy;
  // Claim the control socket before touching the kernel: a second daemon for
  // the same node stops here instead of re-programming a running datapath.
  auto lfd = listen_unix(opts_.socket_path, 0660);
  if (!lfd) return lfd.error();
  listen_fd_ = std::move(*lfd);
  if (!opts_.socket_group.empty()) {
    const group* gr = ::getgrnam(opts_.socket_group.c_str());
    if (!gr) return DP_ERROR("--socket-group {}: no such group", opts_.socket_group);
    if (::chown(opts_.socket_path.c_str(), static_cast<uid_t>(-1), gr->gr_gid) != 0)
      return DP_SYS_ERROR(errno, "giving {} to group {} failed", opts_.socket_path,
                          opts_.socket_group);
    spdlog::info("members of group {} may query {}; changes need root", opts_.socket_group,
                 opts_.socket_path);
  }
  struct stat st {};
  if (::stat(opts_.socket_path.c_str(), &st) == 0) socket_ino_ = st.st_ino;
  pin_dir_ = pin_dir(opts_.bpffs_root, p.node);
  DP_TRY(ensure_bpffs(pin_dir_));
  adopted_ = std::filesystem::exists(std::filesystem::path(pin_dir_) / "dp_config");
  spdlog::info("{} the datapath pinned in {}", adopted_ ? "adopting" : "loading", pin_dir_);
  auto skel = DpSkeleton::load(pin_dir_);
  if (!skel) return skel.error();
  skel_ = std::move(*skel);
  // Pin the programs beside the maps (for bpftool and for operators to see).
  for (auto [prog, name] : {std::pair{skel_->egress_fd(), "prog_egress"},
                            std::pair{skel_->ingress_fd(), "prog_ingress"}}) {
    auto path = std::filesystem::path(pin_dir_) / name;
    ::unlink(path.c_str());
    if (bpf_obj_pin(prog, path.c_str()) != 0)
      return DP_SYS_ERROR(errno, "pinning program at {} failed", path.string());
  }
  uint32_t zero = 0;
  dp_config cfg{};
  if (skel_->map("dp_config").lookup(&zero, &cfg)) gen_ = cfg.active_gen & 1;
  auto cookie = netns_cookie();
  if (cookie)
    netns_cookie_ = *cookie;
  else
    spdlog::warn("{}; sockops will count sockets of every namespace", cookie.error().what());
  ifreq_fd_.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  links_ = std::make_unique<LinkStatsReader>();
  DP_TRY(start_metrics(p.metrics.listen));
  DP_TRY(apply_policy(p));
  spdlog::info("node {}: policy {} (hash {}) applied: {} paths, {} classes, generation {}", p.node,
               p.file, p.hash, p.paths.size(), p.classes.size(), gen_);
  return {};
}

Result<void> Daemon::apply_policy(const Policy& next) {
  // 1. Everything that can fail without touching the kernel.
  std::vector<uint32_t> ifindex;
  for (auto& ps : next.paths) {
    unsigned idx = if_nametoindex(ps.interface.c_str());
    if (!idx)
      return DP_SYS_ERROR(ENODEV, "interface {} of path {} does not exist", ps.interface, ps.name);
    ifindex.push_back(idx);
  }
  BpfMap class_names = skel_->map("dp_class_names"), rail_names = skel_->map("dp_rail_names");
  BpfMap decisions = skel_->map("dp_decisions"), rails = skel_->map("dp_rails");
  BpfMap ifmap = skel_->map("dp_ifindex"), owned = skel_->map("dp_owned");
  std::vector<std::string> wanted_classes, wanted_rails;
  for (auto& c : next.classes) wanted_classes.push_back(c.name);
  for (auto& ps : next.paths) wanted_rails.push_back(ps.name);
  auto existing_classes = read_names(class_names, DP_MAX_CLASSES);
  auto existing_rails = read_names(rail_names, DP_MAX_RAILS);
  auto cslots =
      assign_slots(existing_classes, wanted_classes, DP_MAX_CLASSES, {DP_CLASS_UNCLASSIFIED});
  if (!cslots) return cslots.error();
  auto rslots = assign_slots(existing_rails, wanted_rails, DP_MAX_RAILS);
  if (!rslots) return rslots.error();
  EncodedPolicy enc = encode_policy(next, *cslots, *rslots);
  uint32_t next_gen = have_policy_ || adopted_ ? gen_ ^ 1u : gen_;

  // 2. The inactive generation's classification tables: invisible to packets.
  DP_TRY(write_ports(skel_->map("dp_ports"), next_gen, enc.ports));
  DP_TRY(write_marks(skel_->map("dp_marks"), next_gen, enc.marks));

  // 3. Policy routing, then the tc programs; undo routing if either fails.
  // a path that is failed now stays routed around under the new policy
  std::vector<bool> failed_next(next.paths.size(), false);
  for (size_t i = 0; i < next.paths.size(); ++i) {
    int was = have_policy_ ? policy_.path_index(next.paths[i].name) : -1;
    if (was >= 0 && static_cast<size_t>(was) < routed_failed_.size())
      failed_next[i] = routed_failed_[static_cast<size_t>(was)];
  }
  auto routed = Routing::apply(next, failed_next);
  // Undo: back to the running policy's routing, or none on a first start.
  auto undo_routing = [&] {
    if (have_policy_)
      (void)Routing::apply(policy_, routed_failed_);
    else
      (void)Routing::remove(next);
  };
  if (!routed) {
    undo_routing();
    return routed.error();
  }
  spdlog::info("policy routing: {} added, {} removed, {} unchanged", routed->added, routed->removed,
               routed->unchanged);
  for (size_t i = 0; i < next.paths.size(); ++i) {
    auto r = Tc::attach(static_cast<int>(ifindex[i]), next.paths[i].interface, skel_->egress_fd(),
                        skel_->ingress_fd(), owned);
    if (!r) {
      undo_routing();
      return r.error();
    }
  }

  // TCP measurement: sockops on the policy's cgroup (or the cgroup v2 root).
  std::string cgroup = next.measurement.cgroup;
  if (cgroup.empty()) {
    auto root = cgroup2_root();
    if (root)
      cgroup = *root;
    else
      spdlog::warn("{}: TCP RTT, retransmits and RTOs are not measured", root.error().what());
  }
  if (!cgroup.empty()) {
    auto r = attach_sockops(skel_->sockops_prog(), cgroup, pin_dir_);
    if (!r) {
      undo_routing();
      return r.error();
    }
    if (cgroup != sockops_cgroup_) spdlog::info("sockops attached to cgroup {}", cgroup);
  }
  sockops_cgroup_ = cgroup;

  // 4. Rails, names and decisions, then the flip that makes it all live.
  for (size_t i = 0; i < next.paths.size(); ++i) {
    auto slot = static_cast<uint32_t>((*rslots)[i]);
    dp_rail r = encode_rail(next.paths[i], ifindex[i], true);
    dp_slot_name n = encode_name(next.paths[i].name);
    DP_TRY(rails.update(&slot, &r));
    DP_TRY(rail_names.update(&slot, &n));
    DP_TRY(skel_->set_rail_ifindex(ifindex[i], slot));
  }
  for (size_t i = 0; i < next.classes.size(); ++i) {
    const auto& cs = next.classes[i];
    auto slot = static_cast<uint32_t>((*cslots)[i]);
    dp_decision cur{};
    bool known = existing_classes[slot] == cs.name && decisions.lookup(&slot, &cur);
    auto pinned_rail = decision_single_rail(cur);
    bool keep = known && (cur.flags & kOperatorPinned) && pinned_rail &&
                std::find(rslots->begin(), rslots->end(), *pinned_rail) != rslots->end();
    if (!keep) {
      int prefer = (*rslots)[static_cast<size_t>(next.path_index(cs.prefer))];
      dp_decision d = decision_all_on(prefer, cs.pinned, ++decision_version_);
      DP_TRY(decisions.update(&slot, &d));
    }
    dp_slot_name n = encode_name(cs.name);
    DP_TRY(class_names.update(&slot, &n));
    dp_class_qos q = encode_qos(cs);
    DP_TRY(skel_->map("dp_class_qos").update(&slot, &q));
  }
  uint32_t zero = 0;
  dp_config cfg{};
  cfg.active_gen = next_gen;
  cfg.default_class = enc.default_class;
  cfg.flowlet_gap_ns = static_cast<uint64_t>(next.scheduler.flowlet_gap.count());
  flowlet_gap_ns_ = cfg.flowlet_gap_ns;
  cfg.netns_cookie = netns_cookie_;
  DP_TRY(skel_->map("dp_config").update(&zero, &cfg));
  gen_ = next_gen;

  // 5. What the new policy no longer names.
  for (uint32_t s = 0; s < DP_MAX_CLASSES; ++s) {
    if (std::find(cslots->begin(), cslots->end(), static_cast<int>(s)) != cslots->end()) continue;
    dp_slot_name empty{};
    dp_decision none{};
    dp_class_qos no_qos{};
    (void)class_names.update(&s, &empty);
    (void)decisions.update(&s, &none);
    (void)skel_->map("dp_class_qos").update(&s, &no_qos);
  }
  for (uint32_t s = 0; s < DP_MAX_RAILS; ++s) {
    if (std::find(rslots->begin(), rslots->end(), static_cast<int>(s)) != rslots->end()) continue;
    dp_slot_name empty{};
    dp_rail none{};
    (void)rail_names.update(&s, &empty);
    (void)rails.update(&s, &none);
  }
  std::vector<uint32_t> stale_if;
  uint32_t k = 0, nk = 0;
  void* prev = nullptr;
  while (bpf_map_get_next_key(ifmap.fd(), prev, &nk) == 0) {
    if (std::find(ifindex.begin(), ifindex.end(), nk) == ifindex.end()) stale_if.push_back(nk);
    k = nk;
    prev = &k;
  }
  for (uint32_t idx : stale_if) {
    char name[IF_NAMESIZE] = "?";
    if_indextoname(idx, name);
    auto r = Tc::detach(static_cast<int>(idx), name, &owned);
    if (!r) spdlog::warn("{}", r.error().str());
    (void)skel_->set_rail_ifindex(idx, std::nullopt);
  }

  class_slot_ = *cslots;
  rail_slot_ = *rslots;
  rail_ifindex_ = ifindex;
  rail_vanished_.assign(ifindex.size(), false);
  sched_ = initial_state(next);
  op_pinned_.assign(next.classes.size(), false);
  demand_.assign(next.classes.size(), RateEstimator(next.scheduler.ewma_weight));
  for (size_t i = 0; i < next.classes.size(); ++i) {
    auto slot = static_cast<uint32_t>((*cslots)[i]);
    dp_decision cur{};
    if (!decisions.lookup(&slot, &cur) || !(cur.flags & kOperatorPinned)) continue;
    op_pinned_[i] = true;  // an operator's pin survives the reload or restart
    if (auto r = decision_single_rail(cur))
      for (size_t p = 0; p < rslots->size(); ++p)
        if ((*rslots)[p] == *r) {
          sched_.classes[i].shares.assign(next.paths.size(), 0);
          sched_.classes[i].shares[p] = DP_SHARE_SCALE;
        }
  }
  measures_.clear();
  for (auto& ps : next.paths)
    measures_.emplace_back(ps.capacity_bps, next.scheduler.ewma_weight, next.measurement.window);
  disagreeing_.assign(next.paths.size(), false);
  policy_ = next;
  have_policy_ = true;
  setup_health(next);
  routed_failed_ = failed_next;
  health_changed();
  discover_rdma_ports(false);
  warn_ephemeral_overlap(next);
  return {};
}

// Class port ranges inside the kernel's ephemeral range would classify any
// connection that happens to draw such a source port. Warn unless reserved.
void warn_ephemeral_overlap(const Policy& p) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  unsigned lo = 0, hi = 0;
  if (!(range >> lo >> hi)) return;
  std::ifstream res("/proc/sys/net/ipv4/ip_local_reserved_ports");
  std::string list;
  std::getline(res, list);
  std::vector<bool> reserved(65536, false);
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    unsigned a = 0, b = 0;
    if (std::sscanf(item.c_str(), "%u-%u", &a, &b) == 2 ||
        (b = a, std::sscanf(item.c_str(), "%u", &a) == 1)) {
      if (b < a) b = a;
      for (unsigned x = a; x <= b && x < 65536; ++x) reserved[x] = true;
    }
  }
  for (const auto& c : p.classes) {
    if (c.match == PortMatch::Dst) continue;  // source ports are not matched
    for (const auto& r : c.ports) {
      unsigned n = 0;
      for (unsigned x = std::max<unsigned>(r.lo, lo); x <= std::min<unsigned>(r.hi, hi); ++x)
        n += !reserved[x];
      if (n)
        spdlog::warn(
            "class {}: {} of its ports {} are in the ephemeral port range {}-{}: any connection "
            "given such a source port is classified as {}; reserve them with sysctl "
            "net.ipv4.ip_local_reserved_ports",
            c.name, n, r.str(), lo, hi, c.name);
    }
  }
}

Result<void> Daemon::reload() {
  std::string before = policy_.hash;
  auto r = reload_policy();
  last_reload_ok_ = r.ok();
  ++(r ? reloads_applied_ : reloads_refused_);
  // in dpctl events beside the decisions it may cause
  SchedulerEvent e;
  e.t = SchedClock::now();
  e.kind = "policy";
  e.reason = r ? fmt::format("policy {} -> {} ({})", before, policy_.hash, *r) : r.error().what();
  log_event(std::move(e));
  publish_metrics();  // a refusal shows at once, not a tick later
  if (!r) return r.error();
  return {};
}

// Returns what the reload changed, in one line.
Result<std::string> Daemon::reload_policy() {
  auto load = load_policy_file(opts_.policy_file);
  if (!load.ok()) {
    for (auto& e : load.errors) spdlog::error("{}", e.str());
    return DP_ERROR("policy {} refused ({} error{}); the running policy {} stays",
                    opts_.policy_file, load.errors.size(), load.errors.size() == 1 ? "" : "s",
                    policy_.hash);
  }
  if (load.policy->node != policy_.node)
    return DP_ERROR("policy {} names node \"{}\" but this daemon runs node \"{}\"; refused",
                    opts_.policy_file, load.policy->node, policy_.node);
  if (load.policy->metrics.listen != metrics_listen_) {
    auto m = start_metrics(load.policy->metrics.listen);
    if (!m)
      return DP_ERROR("policy {} refused: {}; the running policy {} stays", opts_.policy_file,
                      m.error().what(), policy_.hash);
  }
  Policy old = policy_;
  auto r = apply_policy(*load.policy);
  if (!r)
    return DP_ERROR("applying policy {} failed: {}; the running policy {} stays", opts_.policy_file,
                    r.error().what(), old.hash);
  // the journal says what each reload changed, as dpctl policy diff would
  auto changes = diff_policies(old.text, "running", policy_.text, policy_.file);
  size_t n = changes ? changes->size() : 0;
  spdlog::info("policy reloaded: {} -> {}{}", old.hash, policy_.hash,
               !changes ? ""
               : n      ? fmt::format(", {} change{}:", n, n == 1 ? "" : "s")
                        : " (comments and layout only)");
  constexpr size_t kLogged = 20;
  for (size_t i = 0; changes && i < n && i < kLogged; ++i)
    spdlog::info("  {}", (*changes)[i].str());
  if (n > kLogged) spdlog::info("  ... and {} more (dpctl policy diff)", n - kLogged);
  arm_tick();
  if (!changes) return std::string("changes unknown");
  if (n == 0) return std::string("comments and layout only");
  if (n == 1) return (*changes)[0].str();
  return fmt::format("{} changes; first {}", n, (*changes)[0].str());
}

// How long a scrape waits for the daemon's next tick to publish: two ticks,
// within [100 ms, 5 s].
namespace {
Nanos fresh_wait(Nanos tick) {
  return std::clamp<Nanos>(2 * tick, std::chrono::milliseconds(100), std::chrono::seconds(5));
}
}  // namespace

// At start, and after a reload that changed the policy's tick.
void Daemon::arm_tick() {
  if (tick_fd_ < 0 || policy_.scheduler.tick == armed_tick_) return;
  auto tick_ns = policy_.scheduler.tick.count();
  itimerspec its{};
  its.it_interval.tv_sec = tick_ns / 1'000'000'000;
  its.it_interval.tv_nsec = tick_ns % 1'000'000'000;
  its.it_value = its.it_interval;
  if (timerfd_settime(tick_fd_, 0, &its, nullptr) != 0) {
    spdlog::error("setting the tick to {} failed: {}", format_duration(policy_.scheduler.tick),
                  std::strerror(errno));
    return;
  }
  if (armed_tick_.count())
    spdlog::info("tick {} -> {}", format_duration(armed_tick_),
                 format_duration(policy_.scheduler.tick));
  armed_tick_ = policy_.scheduler.tick;
  if (metrics_) metrics_->set_fresh_wait(fresh_wait(armed_tick_));
}

Result<void> Daemon::set_class_rail(int class_index, int path_index, bool pinned) {
  auto slot = static_cast<uint32_t>(class_slot_[static_cast<size_t>(class_index)]);
  dp_decision d =
      decision_all_on(rail_slot_[static_cast<size_t>(path_index)], pinned, ++decision_version_);
  if (pinned) d.flags |= kOperatorPinned;
  DP_TRY(skel_->map("dp_decisions").update(&slot, &d));
  auto ci = static_cast<size_t>(class_index);
  if (ci < sched_.classes.size()) {
    sched_.classes[ci].shares.assign(policy_.paths.size(), 0);
    sched_.classes[ci].shares[static_cast<size_t>(path_index)] = DP_SHARE_SCALE;
  }
  if (ci < op_pinned_.size()) op_pinned_[ci] = pinned;
  if (ci < written_.size()) written_[ci] = sched_.classes[ci].shares;
  health_changed();  // a pin onto a rail without a weight is moved off it again
  return {};
}

Result<void> Daemon::write_shares(size_t class_index, const Shares& shares) {
  auto slot = static_cast<uint32_t>(class_slot_[class_index]);
  dp_decision d{};
  for (size_t i = 0; i < shares.size() && i < rail_slot_.size(); ++i)
    d.share[static_cast<size_t>(rail_slot_[i])] = shares[i];
  d.flags = policy_.classes[class_index].pinned ? DP_DECISION_F_PINNED : 0;
  if (class_index < op_pinned_.size() && op_pinned_[class_index]) d.flags |= kOperatorPinned;
  d.version = ++decision_version_;
  return skel_->map("dp_decisions").update(&slot, &d);
}

void Daemon::run_scheduler() {
  if (!policy_.scheduler.adaptive) return;  // static: the policy's rails, never moved
  auto now = SchedClock::now();
  SchedulerInput in;
  in.now = now;
  for (size_t i = 0; i < policy_.paths.size(); ++i) {
    RailInput r;
    const auto& m = measures_[i];
    // a rail that is failed, held down, ramping or drained is not the
    // scheduler's to use: health gives it its traffic back (write_effective)
    r.healthy = !rail_vanished_[i] && i < rails_.size() && rails_[i].health.weight() == 1;
    r.utilisation = m.utilisation();
    if (auto p = m.ls_rtt_us(); p && p->samples >= 10) r.rtt_us = p->p50;
    in.rails.push_back(r);
  }
  for (size_t c = 0; c < policy_.classes.size(); ++c) {
    uint64_t tx = 0;
    for (int rs : rail_slot_)
      tx += counters_[static_cast<size_t>(rs)][static_cast<size_t>(class_slot_[c])].tx_bytes;
    demand_[c].update(tx, now);
    in.demand_bps.push_back(demand_[c].rate() * 8);
  }
  in.operator_pinned = op_pinned_;
  auto res = schedule(policy_, in, sched_);
  for (auto& e : res.events) {
    spdlog::info("scheduler: {} ({} -> {})", e.reason, format_shares(policy_, e.before),
                 format_shares(policy_, e.after));
    ++switches_[{e.klass, e.kind}];
    log_event(e);
  }
  sched_ = res.state;  // written by write_effective, through the rails' health
}

json Daemon::events_json(const json& args) const {
  uint64_t since = 0;
  if (args.contains("since")) {
    if (!args["since"].is_number_unsigned())
      return reply_error("bad_request", "\"since\" must be an event number");
    since = args["since"].get<uint64_t>();
  }
  json out = json::array();
  for (const auto& le : events_) {
    if (le.seq <= since) continue;
    auto shares = [&](const Shares& s) {
      json j = json::object();
      for (size_t i = 0; i < s.size() && i < policy_.paths.size(); ++i)
        j[policy_.paths[i].name] = s[i] / 100.0;
      return j;
    };
    out.push_back(
        {{"seq", le.seq},
         {"time", fmt::format("{:%Y-%m-%dT%H:%M:%S}",
                              fmt::localtime(std::chrono::system_clock::to_time_t(le.wall)))},
         {"mono_ns",
          std::chrono::duration_cast<std::chrono::nanoseconds>(le.e.t.time_since_epoch()).count()},
         {"class", le.e.klass.empty() ? json(nullptr) : json(le.e.klass)},
         {"path", le.e.path.empty() ? json(nullptr) : json(le.e.path)},
         {"kind", le.e.kind},
         {"before", shares(le.e.before)},
         {"after", shares(le.e.after)},
         {"reason", le.e.reason}});
  }
  return reply_ok({{"events", out}, {"last", event_seq_}});
}

Result<void> Daemon::cleanup(const Policy& p, const std::string& bpffs_root) {
  std::string dir = pin_dir(bpffs_root, p.node);
  std::optional<BpfMap> owned;
  Fd owned_fd(bpf_obj_get((std::filesystem::path(dir) / "dp_owned").c_str()));
  if (owned_fd.valid()) owned.emplace(owned_fd.get(), "dp_owned");
  for (auto& ps : p.paths) {
    unsigned idx = if_nametoindex(ps.interface.c_str());
    if (!idx) continue;
    DP_TRY(Tc::detach(static_cast<int>(idx), ps.interface, owned ? &*owned : nullptr));
  }
  auto routed = Routing::remove(p);
  if (!routed) return routed.error();
  spdlog::info("removed {} rules and routes of node {}", routed->removed, p.node);
  DP_TRY(remove_pin_dir(dir));
  return {};
}

// ---------------------------------------------------------------- tick

// A rail whose interface was deleted (or replaced by one with another ifindex)
// must stop being a redirect target at once: the kernel drops a packet
// redirected to an ifindex that no longer exists. A reload re-attaches.
void Daemon::check_interfaces() {
  BpfMap rails = skel_->map("dp_rails");
  for (size_t i = 0; i < policy_.paths.size(); ++i) {
    const auto& ps = policy_.paths[i];
    bool present = ifindex_of(ps.interface) == rail_ifindex_[i];
    if (present || rail_vanished_[i]) continue;
    auto slot = static_cast<uint32_t>(rail_slot_[i]);
    dp_rail r = encode_rail(ps, rail_ifindex_[i], false);
    auto ok = rails.update(&slot, &r);
    rail_vanished_[i] = ok.ok();
    spdlog::error("interface {} of path {} is gone: the path is no longer a redirect target{}",
                  ps.interface, ps.name,
                  ok ? "; reload the policy once it is back" : ": " + ok.error().what());
  }
}

unsigned Daemon::ifindex_of(const std::string& ifname) const {
  ifreq ifr{};
  if (ifreq_fd_.get() < 0 || ifname.size() >= sizeof(ifr.ifr_name))
    return if_nametoindex(ifname.c_str());
  std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
  if (::ioctl(ifreq_fd_.get(), SIOCGIFINDEX, &ifr) != 0) return 0;
  return static_cast<unsigned>(ifr.ifr_ifindex);
}

void Daemon::tick() {
  check_interfaces();
  auto now = std::chrono::steady_clock::now();
  double dt = ticks_ ? std::chrono::duration<double>(now - last_tick_).count() : 0;
  BpfMap counters = skel_->map("dp_counters");
  BpfMap exceptions = skel_->map("dp_exceptions");
  std::array<uint64_t, DP_MAX_RAILS> tx_before{}, rx_before{}, tx_after{}, rx_after{};
  for (int r = 0; r < DP_MAX_RAILS; ++r) {
    for (int c = 0; c < DP_MAX_CLASSES; ++c) {
      tx_before[r] += counters_[r][c].tx_bytes;
      rx_before[r] += counters_[r][c].rx_bytes;
      uint32_t key = static_cast<uint32_t>(r * DP_MAX_CLASSES + c);
      auto v = counters.lookup_percpu<dp_counters>(&key);
      if (v) counters_[r][c] = sum_counters(*v);
      tx_after[r] += counters_[r][c].tx_bytes;
      rx_after[r] += counters_[r][c].rx_bytes;
    }
    for (int e = 0; e < DP_EXC_MAX; ++e) {
      uint32_t key = static_cast<uint32_t>(r * DP_EXC_MAX + e);
      auto v = exceptions.lookup_percpu<uint64_t>(&key);
      if (!v) continue;
      uint64_t sum = 0;
      for (auto x : *v) sum += x;
      exceptions_[r][e] = sum;
    }
    if (dt > 0) {
      tx_bps_[r] = static_cast<double>(tx_after[r] - tx_before[r]) * 8 / dt;
      rx_bps_[r] = static_cast<double>(rx_after[r] - rx_before[r]) * 8 / dt;
    }
  }
  read_tcp();
  measure_paths();
  adapt_flowlet_gap();
  auto t = SchedClock::now();
  for (auto& r : rails_) r.health.tick(t);
  check_evidence();
  run_scheduler();
  health_changed();  // writes the decisions, through the rails' health
  if (metrics_ && metrics_->wanted()) publish_metrics();  // a scrape waits for it
  last_tick_ = now;
  ++ticks_;
  sd_notify(0, "WATCHDOG=1");
}

// Rails whose delays differ need a longer flowlet gap, or a re-placed
// flowlet overtakes the one before it (dp-bench-reorder --background).
void Daemon::adapt_flowlet_gap() {
  std::vector<std::optional<double>> rtt;
  for (const auto& m : measures_) {
    auto p = m.has_sample() ? m.rtt_us() : std::nullopt;
    rtt.push_back(p && p->samples >= 10 ? std::optional<double>(p->p50) : std::nullopt);
  }
  const auto& k = policy_.scheduler;
  auto gap = static_cast<uint64_t>(
      (k.adaptive_flowlet_gap ? effective_flowlet_gap(k.flowlet_gap, rtt) : k.flowlet_gap).count());
  uint64_t cur = flowlet_gap_ns_;
  if (gap == cur || (gap > cur ? gap - cur : cur - gap) < cur / 10) return;  // within 10%
  uint32_t zero = 0;
  dp_config cfg{};
  BpfMap m = skel_->map("dp_config");
  if (!m.lookup(&zero, &cfg)) return;
  cfg.flowlet_gap_ns = gap;
  if (!m.update(&zero, &cfg)) return;
  spdlog::debug("flowlet gap {} -> {} (rails' median RTTs differ)", format_duration(Nanos(cur)),
                format_duration(Nanos(gap)));
  flowlet_gap_ns_ = gap;
}

void Daemon::read_tcp() {
  BpfMap tcp = skel_->map("dp_tcp");
  for (uint32_t r = 0; r < DP_MAX_RAILS; ++r)
    for (uint32_t c = 0; c < DP_MAX_CLASSES; ++c) {
      uint32_t key = r * DP_MAX_CLASSES + c;
      auto v = tcp.lookup_percpu<dp_tcp_stats>(&key);
      if (v) tcp_[r][c] = sum_tcp(*v);
    }
}

void Daemon::discover_rdma_ports(bool quiet) {
  const std::string& root = policy_.measurement.rdma_sysfs;
  auto found = discover_rdma(root);
  if (!found) {
    spdlog::warn("RDMA discovery in {} failed: {}", root, found.error().what());
    return;
  }
  std::vector<RdmaPort> mine;
  for (auto& p : *found)
    for (auto& ps : policy_.paths)
      if (!p.netdev.empty() && p.netdev == ps.interface) mine.push_back(p);
  if (quiet && mine == rdma_ports_) return;
  rdma_ports_ = mine;
  if (found->empty())
    spdlog::info("no RDMA devices under {}: RoCE traffic, if any, is not counted", root);
  for (auto& p : *found) {
    bool used = std::find(mine.begin(), mine.end(), p) != mine.end();
    spdlog::info("RDMA device {} port {} (netdev {}){}", p.device, p.port,
                 p.netdev.empty() ? "none" : p.netdev,
                 used ? ": counted in its path's load" : ": not on a path, ignored");
  }
}

void Daemon::measure_paths() {
  auto now = Clock::now();
  if (ticks_ % 100 == 99) discover_rdma_ports(true);  // devices come and go
  std::vector<std::optional<RdmaCounters>> rdma(policy_.paths.size());
  rdma_by_path_.assign(policy_.paths.size(), {});
  for (auto it = rdma_ports_.begin(); it != rdma_ports_.end();) {
    auto c = read_rdma_counters(policy_.measurement.rdma_sysfs, *it);
    if (!c) {
      spdlog::warn("RDMA device {} port {} disappeared: {}", it->device, it->port,
                   c.error().what());
      it = rdma_ports_.erase(it);
      continue;
    }
    for (size_t i = 0; i < policy_.paths.size(); ++i) {
      if (policy_.paths[i].interface != it->netdev) continue;
      if (!rdma[i]) rdma[i] = RdmaCounters{};
      add_rdma(*rdma[i], *c);
      rdma_by_path_[i].push_back(it->device + "/" + std::to_string(it->port));
    }
    ++it;
  }
  for (size_t i = 0; i < policy_.paths.size() && i < measures_.size(); ++i) {
    auto slot = static_cast<size_t>(rail_slot_[i]);
    PathSnapshot s;
    s.t = now;
    for (size_t c = 0; c < DP_MAX_CLASSES; ++c) {
      s.dp_tx_bytes += counters_[slot][c].tx_bytes;
      s.dp_rx_bytes += counters_[slot][c].rx_bytes;
      add_tcp(s.tcp, tcp_[slot][c]);
    }
    for (size_t c = 0; c < policy_.classes.size(); ++c) {
      if (policy_.classes[c].kind != ClassKind::LatencySensitive) continue;
      const auto& h = tcp_[slot][static_cast<size_t>(class_slot_[c])].rtt_us;
      for (size_t b = 0; b < kHistBuckets; ++b) s.ls_rtt_us[b] += h[b];
    }
    if (rail_vanished_[i]) continue;
    auto link = links_->read(static_cast<int>(rail_ifindex_[i]));
    if (!link) {
      spdlog::debug("{}", link.error().what());
      continue;
    }
    s.link = *link;
    s.rdma = rdma[i];
    measures_[i].update(s);
    const auto& rec = measures_[i].reconciliation();
    if (!rec.agree && !disagreeing_[i])
      spdlog::warn("path {}: {}", policy_.paths[i].name, rec.explanation);
    else if (rec.agree && disagreeing_[i])
      spdlog::info("path {}: the datapath and the link agree again", policy_.paths[i].name);
    disagreeing_[i] = !rec.agree;
  }
}

Result<void> Daemon::start_metrics(const std::string& listen) {
  if (listen.empty()) {
    if (metrics_) spdlog::info("metrics endpoint stopped");
    metrics_.reset();
    metrics_listen_.clear();
    return {};
  }
  std::unique_ptr<MetricsExporter> old = std::move(metrics_);
  old.reset();  // free the port first when the address is the same
  auto e = MetricsExporter::start(listen);
  if (!e) return e.error();
  metrics_ = std::move(*e);
  metrics_listen_ = listen;
  metrics_->set_fresh_wait(fresh_wait(policy_.scheduler.tick));
  spdlog::info("metrics on http://{}/metrics", listen);
  return {};
}

void Daemon::publish_metrics() {
  if (!metrics_) return;
  MetricsView v;
  v.version = kVersion;
  v.node = policy_.node;
  v.policy_file = policy_.file;
  v.policy_hash = policy_.hash;
  v.reloads_applied = reloads_applied_;
  v.reloads_refused = reloads_refused_;
  v.last_reload_ok = last_reload_ok_;
  for (size_t i = 0; i < policy_.paths.size(); ++i) {
    auto slot = static_cast<size_t>(rail_slot_[i]);
    MetricsView::Path p;
    p.name = policy_.paths[i].name;
    p.capacity_bps = policy_.paths[i].capacity_bps;
    p.measure = i < measures_.size() ? &measures_[i] : nullptr;
    p.exceptions = exceptions_[slot];
    if (i < rails_.size()) {
      const auto& h = rails_[i].health;
      p.health = to_string(h.state());
      p.weight = h.weight();
      p.failures = h.failures();
      if (rails_[i].bfd) p.bfd = bfd::to_string(rails_[i].bfd->state());
    }
    v.paths.push_back(std::move(p));
    for (size_t c = 0; c <= policy_.classes.size(); ++c) {
      bool unclassified = c == policy_.classes.size();
      auto cslot = unclassified ? DP_CLASS_UNCLASSIFIED : static_cast<size_t>(class_slot_[c]);
      v.classes.push_back({policy_.paths[i].name,
                           unclassified ? "unclassified" : policy_.classes[c].name,
                           counters_[slot][cslot], tcp_[slot][cslot]});
    }
  }
  for (auto& [key, n] : switches_) v.switches.push_back({key.first, key.second, n});
  v.all_paths_down = all_down_;
  metrics_->publish(build_metrics(v));
}

// ---------------------------------------------------------------- control

json Daemon::status_json() const {
  return json{
      {"node", policy_.node},
      {"version", kVersion},
      {"pid", ::getpid()},
      {"policy",
       {{"file", policy_.file}, {"hash", policy_.hash}, {"disk_hash", policy_disk_hash()}}},
      {"uptime_s",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()},
      {"adopted", adopted_},
      {"bpffs", pin_dir_},
      {"generation", gen_},
      {"paths", policy_.paths.size()},
      {"classes", policy_.classes.size()},
      {"ticks", ticks_},
      {"paths_carrying", paths_carrying()},
      {"all_paths_down", all_down_},
      {"flowlet_gap_us", static_cast<double>(flowlet_gap_ns_) / 1000},
  };
}

json Daemon::paths_json() const {
  json out = json::array();
  BpfMap owned = skel_->map("dp_owned");
  for (size_t i = 0; i < policy_.paths.size(); ++i) {
    const auto& ps = policy_.paths[i];
    int slot = rail_slot_[i];
    dp_counters sum{};
    for (int c = 0; c < DP_MAX_CLASSES; ++c) {
      const auto& x = counters_[static_cast<size_t>(slot)][static_cast<size_t>(c)];
      sum.tx_bytes += x.tx_bytes;
      sum.tx_packets += x.tx_packets;
      sum.rx_bytes += x.rx_bytes;
      sum.rx_packets += x.rx_packets;
      sum.redirect_packets += x.redirect_packets;
      sum.redirect_bytes += x.redirect_bytes;
    }
    int ifindex = static_cast<int>(ifindex_of(ps.interface));
    json tc = nullptr;
    if (ifindex) {
      auto st = Tc::status(ifindex, &owned);
      if (st)
        tc = {{"egress_prog_id", st->egress_prog_id},
              {"ingress_prog_id", st->ingress_prog_id},
              {"clsact_owned", st->clsact_owned}};
    }
    json exc = json::object();
    for (int e = 0; e < DP_EXC_MAX; ++e)
      if (exceptions_[static_cast<size_t>(slot)][static_cast<size_t>(e)])
        exc[exception_name(e)] = exceptions_[static_cast<size_t>(slot)][static_cast<size_t>(e)];
    json m = nullptr;
    if (i < measures_.size() && measures_[i].has_sample()) {
      const auto& pm = measures_[i];
      const auto& last = pm.latest();
      auto secs = [](Nanos d) { return std::chrono::duration<double>(d).count(); };
      json rtt = nullptr, loss = nullptr;
      if (auto r = pm.rtt_us())
        rtt = {{"p50_us", r->p50},
               {"p95_us", r->p95},
               {"p99_us", r->p99},
               {"samples", r->samples},
               {"window_s", secs(r->window)}};
      if (auto l = pm.loss())
        loss = {{"ratio", l->value},
                {"retrans_segs", l->numerator},
                {"segs_out", l->denominator},
                {"window_s", secs(l->window)}};
      const auto& rec = pm.reconciliation();
      m = {
          {"tx_bps", pm.tx_bps()},
          {"rx_bps", pm.rx_bps()},
          {"rate_window_s", secs(pm.rate_window())},
          {"utilisation", pm.utilisation()},
          {"rtt", rtt},
          {"loss", loss},
          {"tcp",
           {{"segs_out", last.tcp.segs_out},
            {"retrans_segs", last.tcp.retrans_segs},
            {"rto_events", last.tcp.rto_events},
            {"rtt_samples", last.tcp.rtt_samples}}},
          {"link",
           {{"tx_bytes", last.link.tx_bytes},
            {"rx_bytes", last.link.rx_bytes},
            {"tx_packets", last.link.tx_packets},
            {"rx_packets", last.link.rx_packets},
            {"tx_dropped", last.link.tx_dropped},
            {"rx_dropped", last.link.rx_dropped},
            {"tx_errors", last.link.tx_errors},
            {"rx_errors", last.link.rx_errors},
            {"oper_up", last.link.oper_up}}},
          {"reconciliation",
           {{"agree", rec.agree},
            {"datapath_bytes", rec.datapath_bytes},
            {"link_bytes", rec.link_bytes},
            {"window_s", secs(rec.window)},
            {"explanation", rec.explanation}}},
          {"sample_age_s", secs(std::chrono::duration_cast<Nanos>(Clock::now() - last.t))},
          {"rdma", nullptr},
      };
      if (last.rdma) {
        const auto& rd = *last.rdma;
        m["rdma"] = {
            {"devices", i < rdma_by_path_.size() ? rdma_by_path_[i] : std::vector<std::string>{}},
            {"tx_bps", pm.rdma_tx_bps()},
            {"rx_bps", pm.rdma_rx_bps()},
            {"tx_bytes", rd.tx_bytes},
            {"rx_bytes", rd.rx_bytes},
            {"tx_packets", rd.tx_packets},
            {"rx_packets", rd.rx_packets},
            {"cnp_sent", rd.cnp_sent},
            {"cnp_handled", rd.cnp_handled},
            {"ecn_marked", rd.ecn_marked},
            {"out_of_sequence", rd.out_of_sequence},
            {"seq_errors", rd.seq_errors},
            {"local_ack_timeouts", rd.local_ack_timeouts}};
      }
    }
    double tx_bps = m.is_null() ? 0.0 : m["tx_bps"].get<double>();
    out.push_back({
        {"name", ps.name},
        {"interface", ps.interface},
        {"ifindex", ifindex},
        {"slot", slot},
        {"capacity_bps", ps.capacity_bps},
        {"table", ps.table},
        {"fwmark", ps.fwmark},
        {"gateway", ps.gateway ? json(ps.gateway->str()) : json(nullptr)},
        {"gateway6", ps.gateway6 ? json(ps.gateway6->str()) : json(nullptr)},
        {"tc", tc},
        {"tx_bytes", sum.tx_bytes},
        {"tx_packets", sum.tx_packets},
        {"rx_bytes", sum.rx_bytes},
        {"rx_packets", sum.rx_packets},
        {"redirected_out_packets", sum.redirect_packets},
        {"redirected_out_bytes", sum.redirect_bytes},
        {"tx_bps", tx_bps},
        {"rx_bps", m.is_null() ? 0.0 : m["rx_bps"].get<double>()},
        {"datapath_tx_bps", tx_bps_[static_cast<size_t>(slot)]},
        {"utilisation", m.is_null() ? 0.0 : m["utilisation"].get<double>()},
        {"measure", m},
        {"exceptions", exc},
        {"interface_present", !rail_vanished_[i]},
        {"health", health_json(i)},
    });
  }
  return out;
}

json Daemon::classes_json() const {
  json out = json::array();
  BpfMap decisions = skel_->map("dp_decisions");
  for (size_t i = 0; i < policy_.classes.size(); ++i) {
    const auto& cs = policy_.classes[i];
    auto slot = static_cast<uint32_t>(class_slot_[i]);
    dp_decision d{};
    (void)decisions.lookup(&slot, &d);
    json shares = json::object(), tx = json::object(), rx = json::object(), tcp = json::object();
    uint64_t tx_total = 0, rx_total = 0, flowlets = 0, replaced = 0, placed = 0;
    std::optional<std::string> rail;
    for (size_t p = 0; p < policy_.paths.size(); ++p) {
      auto rs = static_cast<size_t>(rail_slot_[p]);
      const auto& c = counters_[rs][slot];
      shares[policy_.paths[p].name] = 100.0 * d.share[rs] / DP_SHARE_SCALE;
      tx[policy_.paths[p].name] = c.tx_bytes;
      const TcpCounters& t = tcp_[rs][slot];
      tcp[policy_.paths[p].name] = {
          {"srtt_mean_us",
           t.rtt_samples ? static_cast<double>(t.srtt_us_sum) / static_cast<double>(t.rtt_samples)
                         : 0.0},
          {"rtt_samples", t.rtt_samples},
          {"segs_out", t.segs_out},
          {"retrans_segs", t.retrans_segs},
          {"rto_events", t.rto_events}};
      rx[policy_.paths[p].name] = c.rx_bytes;
      tx_total += c.tx_bytes;
      rx_total += c.rx_bytes;
      flowlets += c.flowlets;
      replaced += c.flows_replaced;
      placed += c.flows_placed;
      if (d.share[rs] == DP_SHARE_SCALE) rail = policy_.paths[p].name;
    }
    json ports = json::array();
    for (auto& r : cs.ports) ports.push_back(r.str());
    out.push_back({
        {"name", cs.name},
        {"slot", slot},
        {"kind", to_string(cs.kind)},
        {"priority", cs.priority},
        {"ports", ports},
        {"match", to_string(cs.match)},
        {"mark", cs.mark ? json(*cs.mark) : json(nullptr)},
        {"prefer", cs.prefer},
        {"rail", rail ? json(*rail) : json(nullptr)},
        {"shares", shares},
        {"pinned", (d.flags & DP_DECISION_F_PINNED) != 0},
        {"pinned_by", (d.flags & kOperatorPinned) ? "operator" : (cs.pinned ? "policy" : "")},
        {"tx_bytes", tx_total},
        {"rx_bytes", rx_total},
        {"tx_bytes_by_path", tx},
        {"rx_bytes_by_path", rx},
        {"tcp_by_path", tcp},
        {"flows_placed", placed},
        {"flowlets", flowlets},
        {"flows_replaced", replaced},
        {"dscp", cs.dscp ? json(*cs.dscp) : json(nullptr)},
        {"skb_priority", cs.skb_priority ? json(*cs.skb_priority) : json(nullptr)},
    });
  }
  return out;
}

json Daemon::flows_json(const json& args) const {
  size_t top = 20;
  if (args.contains("top")) {
    if (!args["top"].is_number_unsigned() || args["top"].get<uint64_t>() == 0)
      return reply_error("bad_request", "\"top\" must be a positive integer");
    top = args["top"].get<size_t>();
  }
  std::optional<std::string> want_class, want_path;
  for (auto [name, dst] : {std::pair{"class", &want_class}, std::pair{"path", &want_path}}) {
    if (!args.contains(name)) continue;
    if (!args[name].is_string())
      return reply_error("bad_request", fmt::format("\"{}\" must be a string", name));
    *dst = args[name].get<std::string>();
  }
  if (want_class && !policy_.klass(*want_class))
    return reply_error("not_found", fmt::format("no class named \"{}\"", *want_class));
  if (want_path && !policy_.path(*want_path))
    return reply_error("not_found", fmt::format("no path named \"{}\"", *want_path));
  std::array<std::string, DP_MAX_CLASSES> cname;
  std::array<std::string, DP_MAX_RAILS> rname;
  for (size_t i = 0; i < policy_.classes.size(); ++i)
    cname[static_cast<size_t>(class_slot_[i])] = policy_.classes[i].name;
  for (size_t i = 0; i < policy_.paths.size(); ++i)
    rname[static_cast<size_t>(rail_slot_[i])] = policy_.paths[i].name;

  BpfMap flows = skel_->map("dp_flows");
  struct Row {
    dp_flow_key k;
    dp_flow f;
  };
  std::vector<Row> rows;
  dp_flow_key k{}, next{};
  void* prev = nullptr;
  size_t total = 0;
  while (bpf_map_get_next_key(flows.fd(), prev, &next) == 0) {
    k = next;
    prev = &k;
    Row r{k, {}};
    if (!flows.lookup(&k, &r.f)) continue;
    ++total;
    if (r.f.cls >= DP_MAX_CLASSES || r.f.rail >= DP_MAX_RAILS) continue;
    if (want_class && cname[r.f.cls] != *want_class) continue;
    if (want_path && rname[r.f.rail] != *want_path) continue;
    rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.f.bytes > b.f.bytes; });
  if (rows.size() > top) rows.resize(top);
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // bpf_ktime_get_ns() is CLOCK_MONOTONIC
  uint64_t now_ns =
      static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
  auto addr = [](const __u32* a) {
    IpAddr ip;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(a, mapped, 12) == 0) {
      ip.family = AF_INET;
      std::memcpy(ip.bytes.data(), reinterpret_cast<const uint8_t*>(a) + 12, 4);
    } else {
      ip.family = AF_INET6;
      std::memcpy(ip.bytes.data(), a, 16);
    }
    return ip.str();
  };
  json out = json::array();
  for (auto& r : rows)
    out.push_back({
        {"proto", r.k.proto == IPPROTO_TCP ? "tcp" : "udp"},
        {"src", addr(r.k.saddr)},
        {"sport", ntohs(r.k.sport)},
        {"dst", addr(r.k.daddr)},
        {"dport", ntohs(r.k.dport)},
        {"class", cname[r.f.cls]},
        {"path", rname[r.f.rail]},
        {"bytes", r.f.bytes},
        {"packets", r.f.packets},
        {"srtt_us", r.f.srtt_us},
        {"retrans_segs", r.f.retrans_segs},
        {"rto_events", r.f.rto_events},
        {"replacements", r.f.replacements},
        {"idle_s",
         now_ns > r.f.last_seen_ns ? static_cast<double>(now_ns - r.f.last_seen_ns) / 1e9 : 0.0},
    });
  return reply_ok({{"flows", out}, {"total", total}});
}

// The hash of the policy file as it is on disk now (null if unreadable):
// edited and not reloaded, it differs from the running policy's.
json Daemon::policy_disk_hash() const {
  std::ifstream in(policy_.file, std::ios::binary);
  if (!in) return nullptr;
  std::stringstream disk;
  disk << in.rdbuf();
  return content_hash(disk.str());
}

json Daemon::handle(const json& req, bool privileged) {
  if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
    return reply_error("bad_request", "a request is a JSON object with a string \"cmd\"");
  const std::string cmd = req["cmd"];
  const json args = req.value("args", json::object());
  if (!args.is_object()) return reply_error("bad_request", "\"args\" must be an object");
  auto arg = [&](const char* name) -> std::optional<std::string> {
    if (!args.contains(name) || !args[name].is_string()) return std::nullopt;
    return args[name].get<std::string>();
  };

  if (cmd == "status") return reply_ok(status_json());
  if (cmd == "path.list") return reply_ok(paths_json());
  if (cmd == "path.show") {
    auto name = arg("path");
    if (!name) return reply_error("bad_request", "path.show needs \"path\"");
    for (auto& p : paths_json())
      if (p["name"] == *name) return reply_ok(p);
    return reply_error("not_found", fmt::format("no path named \"{}\"", *name));
  }
  if (cmd == "class.list") return reply_ok(classes_json());
  if (cmd == "flow.list") return flows_json(args);
  if (cmd == "policy.show") {
    std::error_code ec;
    std::string file = std::filesystem::absolute(policy_.file, ec).string();
    return reply_ok({{"file", ec ? policy_.file : file},
                     {"hash", policy_.hash},
                     {"node", policy_.node},
                     {"text", policy_.text},
                     {"disk_hash", policy_disk_hash()}});
  }

  // Mutating commands.
  if (cmd == "events") return events_json(args);
  if (cmd == "class.set" || cmd == "class.unpin" || cmd == "policy.reload" || cmd == "path.drain" ||
      cmd == "path.undrain") {
    if (!privileged) return reply_error("permission_denied", fmt::format("{} needs root", cmd));
  }
  if (cmd == "path.drain" || cmd == "path.undrain") {
    auto name = arg("path");
    if (!name) return reply_error("bad_request", fmt::format("{} needs \"path\"", cmd));
    return drain(*name, cmd == "path.drain");
  }
  if (cmd == "class.set") {
    auto cls = arg("class");
    auto path = arg("path");
    if (!cls || !path) return reply_error("bad_request", "class.set needs \"class\" and \"path\"");
    int ci = -1;
    for (size_t i = 0; i < policy_.classes.size(); ++i)
      if (policy_.classes[i].name == *cls) ci = static_cast<int>(i);
    if (ci < 0) return reply_error("not_found", fmt::format("no class named \"{}\"", *cls));
    int pi = policy_.path_index(*path);
    if (pi < 0) return reply_error("not_found", fmt::format("no path named \"{}\"", *path));
    auto r = set_class_rail(ci, pi, true);
    if (!r) return reply_error("failed", r.error().what());
    spdlog::info("class {} pinned to path {} by operator", *cls, *path);
    return reply_ok({{"class", *cls}, {"path", *path}, {"pinned", true}});
  }
  if (cmd == "class.unpin") {
    auto cls = arg("class");
    if (!cls) return reply_error("bad_request", "class.unpin needs \"class\"");
    size_t ci = 0;
    while (ci < policy_.classes.size() && policy_.classes[ci].name != *cls) ++ci;
    if (ci == policy_.classes.size())
      return reply_error("not_found", fmt::format("no class named \"{}\"", *cls));
    if (policy_.classes[ci].pinned)
      return reply_error("invalid",
                         fmt::format("{} is pinned by the policy ({}); edit the policy to unpin it",
                                     *cls, policy_.file));
    auto slot = static_cast<uint32_t>(class_slot_[ci]);
    dp_decision d{};
    BpfMap decisions = skel_->map("dp_decisions");
    if (auto r = decisions.lookup(&slot, &d); !r) return reply_error("failed", r.error().what());
    d.flags &= ~kOperatorPinned;
    d.version = ++decision_version_;
    if (auto r = decisions.update(&slot, &d); !r) return reply_error("failed", r.error().what());
    op_pinned_[ci] = false;
    if (!policy_.scheduler.adaptive) {
      // static mode has no scheduler to take it back: the policy's rail
      auto r = set_class_rail(static_cast<int>(ci), policy_.path_index(policy_.classes[ci].prefer),
                              false);
      if (!r) return reply_error("failed", r.error().what());
    }
    spdlog::info(
        "class {} unpinned by operator: {}", *cls,
        policy_.scheduler.adaptive ? "the scheduler decides again" : "back on its preferred rail");
    return reply_ok({{"class", *cls}, {"pinned", false}});
  }
  if (cmd == "policy.reload") {
    auto r = reload();
    if (!r) return reply_error("invalid", r.error().what());
    return reply_ok({{"hash", policy_.hash}});
  }
  return reply_error("unknown_command", fmt::format("unknown command \"{}\"", cmd));
}

// ---------------------------------------------------------------- loop

namespace {

struct Client {
  Fd fd;
  std::string in;
  bool privileged = false;
};

// A reply larger than the socket buffer (events, flows) is sent in pieces;
// a client that does not read for a second is dropped.
bool send_reply(int fd, const std::string& out) {
  size_t off = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (off < out.size()) {
    ssize_t w = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{fd, POLLOUT, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
  }
  return true;
}

}  // namespace

int Daemon::run() {
  sigset_t mask = daemon_signals();
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  Fd sfd(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  Fd tfd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  tick_fd_ = tfd.get();
  arm_tick();
  const Fd* lfd = &listen_fd_;
  Fd ep(epoll_create1(EPOLL_CLOEXEC));
  epoll_fd_ = ep.get();
  auto watch = [&](int fd) { watch_fd(fd); };
  watch(sfd.get());
  watch(tfd.get());
  watch(lfd->get());
  for (auto& [fd, i] : bfd_fds_) watch(fd);
  int link_fd = -1;
  if (auto r = open_link_events(); !r)
    spdlog::error("{}: carrier changes are seen only at the next tick", r.error().what());
  else
    watch(link_fd = nl_socket_get_fd(link_events_.get()));
  std::map<int, Client> clients;
  tick();
  sd_notify(0, "READY=1");
  spdlog::info("serving {} (tick {})", opts_.socket_path, format_duration(policy_.scheduler.tick));

  int exit_code = 0;
  for (bool running = true; running;) {
    epoll_event evs[16];
    int n = epoll_wait(ep.get(), evs, 16, next_timeout_ms());
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      int fd = evs[i].data.fd;
      if (fd == link_fd) {
        on_link_events();
      } else if (auto b = bfd_fds_.find(fd); b != bfd_fds_.end()) {
        on_bfd_readable(b->second);
      } else if (fd == sfd.get()) {
        signalfd_siginfo si{};
        while (::read(sfd.get(), &si, sizeof(si)) == sizeof(si)) {
          if (si.ssi_signo == SIGHUP) {
            sd_notify(0, "RELOADING=1");
            auto r = reload();
            if (!r) spdlog::error("{}", r.error().what());
            sd_notify(0, "READY=1");
          } else {
            spdlog::info("signal {}: exiting; the datapath stays pinned and steering",
                         strsignal(static_cast<int>(si.ssi_signo)));
            running = false;
          }
        }
      } else if (fd == tfd.get()) {
        uint64_t expirations = 0;
        (void)!::read(tfd.get(), &expirations, sizeof(expirations));
        tick();
      } else if (fd == lfd->get()) {
        int c;
        while ((c = ::accept4(lfd->get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
          ucred cred{};
          socklen_t len = sizeof(cred);
          Client cl;
          cl.fd.reset(c);
          cl.privileged = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == 0;
          watch(c);
          clients.emplace(c, std::move(cl));
        }
      } else if (auto it = clients.find(fd); it != clients.end()) {
        Client& cl = it->second;
        char buf[8192];
        ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
        bool close_it = r == 0 || (r < 0 && errno != EAGAIN);
        if (r > 0) cl.in.append(buf, static_cast<size_t>(r));
        size_t nl;
        while (!close_it && (nl = cl.in.find('\n')) != std::string::npos) {
          json req = json::parse(cl.in.substr(0, nl), nullptr, false);
          cl.in.erase(0, nl + 1);
          json reply = req.is_discarded()
                           ? reply_error("bad_request", "the request is not valid JSON")
                           : handle(req, cl.privileged);
          std::string out = reply.dump() + "\n";
          if (!send_reply(fd, out)) close_it = true;
        }
        if (!close_it && cl.in.size() > kMaxRequestBytes) {
          std::string out =
              reply_error("bad_request", "request too large (limit 64 KiB per line)").dump() + "\n";
          (void)::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
          close_it = true;
        }
        if (close_it) {
          epoll_ctl(ep.get(), EPOLL_CTL_DEL, fd, nullptr);
          clients.erase(it);
        }
      }
    }
    service_bfd();
  }
  sd_notify(0, "STOPPING=1");
  send_admin_down();  // RFC 5882 3.2: the peers do not take this for a failure
  epoll_fd_ = -1;
  struct stat st {};
  if (::stat(opts_.socket_path.c_str(), &st) == 0 && st.st_ino == socket_ino_)
    ::unlink(opts_.socket_path.c_str());
  tick_fd_ = -1;  // tfd closes with run()
  return exit_code;
}

}  // namespace dp
