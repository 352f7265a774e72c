// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/datapath.h"

#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "dualpath/kernel/procfs.h"
#include "dualpath/kernel/routing.h"

namespace dp {

namespace {

std::vector<std::string> read_names(const Map<__u32, dp_slot_name>& m, size_t n) {
  std::vector<std::string> out(n);
  for (uint32_t i = 0; i < n; ++i) {
    dp_slot_name v{};
    if (m.lookup(i, &v)) out[i] = decode_name(v);
  }
  return out;
}

Result<void> write_ports(const dp_ports_map& m, uint32_t gen,
                         const std::vector<dp_port_entry>& ports) {
  std::vector<uint32_t> keys(DP_PORT_SPACE);
  for (uint32_t i = 0; i < DP_PORT_SPACE; ++i) keys[i] = gen * DP_PORT_SPACE + i;
  uint32_t count = DP_PORT_SPACE;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  if (bpf_map_update_batch(m.fd(), keys.data(), ports.data(), &count, &opts) == 0) return {};
  for (uint32_t i = 0; i < DP_PORT_SPACE; ++i) DP_TRY(m.update(keys[i], ports[i]));
  return {};
}

Result<void> write_marks(const dp_marks_map& m, uint32_t gen,
                         const std::vector<std::pair<uint32_t, uint8_t>>& marks) {
  for (auto& s : m.keys())
    if (s.gen == gen) DP_TRY(m.remove(s));
  for (auto& [mark, cls] : marks) {
    dp_mark_key mk{gen, mark};
    dp_mark_val mv{cls, {}};
    DP_TRY(m.update(mk, mv));
  }
  return {};
}

bool contains(const std::vector<int>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), static_cast<int>(x)) != v.end();
}

}  // namespace

std::string Datapath::pin_dir(const std::string& bpffs_root, const std::string& node) {
  return (std::filesystem::path(bpffs_root) / "dualpath" / node).string();
}

Result<std::unique_ptr<Datapath>> Datapath::open(const std::string& dir) {
  std::unique_ptr<Datapath> d(new Datapath);
  d->pin_dir_ = dir;
  DP_TRY(ensure_bpffs(dir));
  d->adopted_ = std::filesystem::exists(std::filesystem::path(dir) / "dp_config");
  spdlog::info("{} the datapath pinned in {}", d->adopted_ ? "adopting" : "loading", dir);
  auto skel = DpSkeleton::load(dir);
  if (!skel) return skel.error();
  d->skel_ = std::move(*skel);
  DP_TRY(d->begin_upgrade());
  // Pin the tc programs beside the maps (for bpftool and for operators to
  // see); the others are held by their pinned links.
  for (const auto& spec : kPrograms) {
    if (!is_tc(spec)) continue;
    auto path = std::filesystem::path(dir) / pin_name(spec);
    ::unlink(path.c_str());
    if (bpf_obj_pin(bpf_program__fd(d->skel_->program(spec.name)), path.c_str()) != 0)
      return DP_SYS_ERROR(errno, "pinning program {} at {} failed", spec.name, path.string());
  }
  uint32_t zero = 0;
  dp_config cfg{};
  if (d->skel_->dp_config().lookup(zero, &cfg)) d->gen_ = cfg.active_gen & 1;
  auto cookie = netns_cookie();
  if (cookie)
    d->netns_cookie_ = *cookie;
  else
    spdlog::warn("{}; sockops will count sockets of every namespace", cookie.error().what());
  d->ifreq_fd_.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (auto root = cgroup2_root()) d->cgroup_root_ = *root;
  return d;
}

Result<void> Datapath::begin_upgrade() {
  uint32_t zero = 0;
  dp_abi abi{};
  auto abi_map = skel_->dp_abi();
  std::vector<StaleMap> stale = skel_->take_stale();
  if (adopted_) {
    // dp_abi is new with versioning: a build before it leaves none (and
    // load() has just made an empty one, version 0)
    (void)abi_map.lookup(zero, &abi);
    found_layout_ = abi.layout;
  }
  if (adopted_ && (found_layout_ != DP_LAYOUT_VERSION || !stale.empty())) {
    spdlog::info("the pinned datapath has layout version {}, this build {}: upgrading in place",
                 found_layout_, DP_LAYOUT_VERSION);
    auto u = LayoutUpgrade::begin(std::move(stale));
    if (!u) return u.error();
    upgrade_report_ = u->report();
    upgrade_ = std::make_unique<LayoutUpgrade>(std::move(*u));
    return {};  // dp_abi is written when the upgrade is finished
  }
  abi.layout = DP_LAYOUT_VERSION;
  return abi_map.update(zero, abi);
}

Result<void> Datapath::finish_upgrade() {
  if (!upgrade_) return {};
  std::vector<std::string> keep = skel_->pinned_map_names();
  for (const auto& spec : kPrograms) keep.push_back(pin_name(spec));
  DP_TRY(upgrade_->finish(pin_dir_, keep));
  upgrade_.reset();
  uint32_t zero = 0;
  dp_abi abi{};
  abi.layout = DP_LAYOUT_VERSION;
  DP_TRY(skel_->dp_abi().update(zero, abi));
  spdlog::info(
      "upgrade from layout version {} to {} finished: the programs are swapped and the "
      "new maps pinned",
      found_layout_, DP_LAYOUT_VERSION);
  return {};
}

Result<Datapath::Staged> Datapath::stage(const Policy& next, bool running) {
  Staged s;
  for (auto& ps : next.paths) {
    unsigned idx = if_nametoindex(ps.interface.c_str());
    if (!idx)
      return DP_SYS_ERROR(ENODEV, "interface {} of path {} does not exist", ps.interface, ps.name);
    s.ifindex.push_back(idx);
  }
  std::vector<std::string> wanted_classes, wanted_rails;
  for (auto& c : next.classes) wanted_classes.push_back(c.name);
  for (auto& ps : next.paths) wanted_rails.push_back(ps.name);
  s.existing_classes = read_names(skel_->dp_class_names(), DP_MAX_CLASSES);
  auto existing_rails = read_names(skel_->dp_rail_names(), DP_MAX_RAILS);
  auto cslots =
      assign_slots(s.existing_classes, wanted_classes, DP_MAX_CLASSES, {DP_CLASS_UNCLASSIFIED});
  if (!cslots) return cslots.error();
  auto rslots = assign_slots(existing_rails, wanted_rails, DP_MAX_RAILS);
  if (!rslots) return rslots.error();
  s.class_slot = *cslots;
  s.rail_slot = *rslots;
  s.enc = encode_policy(next, s.class_slot, s.rail_slot);
  s.gen = running ? gen_ ^ 1u : gen_;
  DP_TRY(write_ports(skel_->dp_ports(), s.gen, s.enc.ports));
  DP_TRY(write_marks(skel_->dp_marks(), s.gen, s.enc.marks));
  if (!cgroup_root_.empty()) s.cgroups = resolve_cgroups(next, cgroup_root_);
  DP_TRY(write_cgroups(s.gen, s.cgroups, s.class_slot));
  return s;
}

Result<size_t> Datapath::write_cgroups(uint32_t gen, const std::vector<CgroupRule>& rules,
                                       const std::vector<int>& class_slot) {
  auto m = skel_->dp_cgroups();
  std::map<uint64_t, uint8_t> want;
  for (auto& r : rules) {
    if (!r.id) continue;
    auto [it, fresh] = want.emplace(r.id, static_cast<uint8_t>(class_slot.at(r.klass)));
    if (!fresh && it->second != class_slot.at(r.klass))
      spdlog::warn("cgroup {} ({}) is named by two classes; the first in the policy takes it",
                   r.dir, r.rule);
  }
  for (auto& [id, slot] : want) {
    dp_cgroup_key k{id, gen, 0};
    dp_cgroup_val v{slot, {}};
    DP_TRY(m.update(k, v));
  }
  for (auto& k : m.keys())
    if (k.gen == gen && !want.count(k.id)) (void)m.remove(k);
  clear_cgroup_cache(gen);
  return want.size();
}

void Datapath::clear_cgroup_cache(uint32_t gen) {
  auto cache = skel_->dp_cgroup_cache();
  for (auto& k : cache.keys())
    if (k.gen == gen) (void)cache.remove(k);
}

Result<void> Datapath::set_cgroup_gens(uint32_t gens) {
  uint32_t zero = 0;
  return skel_->dp_cgroup_gens().update(zero, gens);
}

bool Datapath::refresh_cgroups(const Policy& p) {
  if (cgroup_root_.empty() || class_slot_.size() != p.classes.size()) return false;
  if (cgroup_cache_dirty_) {
    // a packet that walked the ancestors just before the last change may
    // have cached the old answer after the cache was emptied
    clear_cgroup_cache(gen_);
    cgroup_cache_dirty_ = false;
  }
  auto now = resolve_cgroups(p, cgroup_root_, cgroups_);
  if (now == cgroups_) return false;
  for (auto& r : now) {
    auto was = std::find_if(cgroups_.begin(), cgroups_.end(), [&](const CgroupRule& o) {
      return o.klass == r.klass && o.rule == r.rule;
    });
    uint64_t before = was == cgroups_.end() ? 0 : was->id;
    if (r.id && r.id != before)
      spdlog::info("class {}: {} is cgroup {} (id {})", p.classes[r.klass].name, r.rule, r.dir,
                   r.id);
    else if (!r.id && before)
      spdlog::info("class {}: {} is gone", p.classes[r.klass].name, r.rule);
  }
  auto n = write_cgroups(gen_, now, class_slot_);
  if (!n) {
    spdlog::error("{}", n.error().str());
    return false;
  }
  if (auto r = set_cgroup_gens(*n ? 1u << gen_ : 0u); !r) spdlog::error("{}", r.error().str());
  cgroups_ = std::move(now);
  cgroup_cache_dirty_ = true;
  return true;
}

Result<void> Datapath::attach(const Policy& next, const Staged& s) {
  // TCP measurement and connect-time placement: the policy's cgroup (or the
  // cgroup v2 root). Connect-time placement is inert in the shared topology
  // (no rail has a network in dp_rail_nets), and the sk_lookup handover too
  // (dp_local_addrs is all zero there), so they are attached in both.
  std::string cgroup = next.measurement.cgroup;
  if (cgroup.empty()) {
    auto root = cgroup2_root();
    if (root)
      cgroup = *root;
    else
      spdlog::warn("{}: TCP RTT, retransmits and RTOs are not measured", root.error().what());
  }
  // multipath classes: every socket() of the node runs their hook, so only
  // while the policy has one
  bool multipath = next.has_multipath();
  auto owned = skel_->dp_owned();
  for (const auto& spec : kPrograms) {
    bpf_program* prog = skel_->program(spec.name);
    std::string what(spec.pin);
    bool wanted = spec.when == When::Always || multipath;
    if (wanted && !prog)
      spdlog::warn(
          "multipath classes: {}; only commands started with `dpctl run --class` are made MPTCP "
          "(through mptcpize), other sockets of those classes stay TCP",
          skel_->refused(spec.name));
    if (!wanted || !prog) {
      if (!is_tc(spec)) DP_TRY(detach_pinned(pin_dir_, what));
      continue;
    }
    switch (spec.hook) {
      case Hook::TcEgress:
      case Hook::TcIngress:
        for (size_t i = 0; i < next.paths.size(); ++i)
          DP_TRY(Tc::attach(static_cast<int>(s.ifindex[i]), next.paths[i].interface,
                            spec.hook == Hook::TcEgress, bpf_program__fd(prog), owned));
        break;
      case Hook::Cgroup:
        if (!cgroup.empty()) DP_TRY(attach_cgroup(prog, cgroup, pin_dir_, what));
        break;
      case Hook::Netns:
        DP_TRY(attach_netns(prog, pin_dir_, what));
        break;
      case Hook::Trace:
        DP_TRY(attach_trace(prog, pin_dir_, what));
        break;
      case Hook::Iter:
        DP_TRY(attach_iter(prog, pin_dir_, what));
        break;
    }
  }
  if (!cgroup.empty() && cgroup != sockops_cgroup_)
    spdlog::info("sockops and connect-time placement attached to cgroup {}", cgroup);
  sockops_cgroup_ = cgroup;
  // every program of this build is in place: the old maps can go
  return finish_upgrade();
}

// The policy's peer table into dp_peers: every entry written, then the
// addresses the policy no longer holds removed.
Result<void> Datapath::write_peers(const Policy& next, const std::vector<int>& rail_slot) {
  auto peers = skel_->dp_peers();
  auto want = encode_peers(next, rail_slot);
  std::set<std::string> keep;
  for (auto& [k, v] : want) {
    DP_TRY(peers.update(k, v));
    keep.insert(std::string(reinterpret_cast<const char*>(&k), sizeof(k)));
  }
  std::vector<dp_peer_key> stale;
  for (auto& k : peers.keys())
    if (!keep.count(std::string(reinterpret_cast<const char*>(&k), sizeof(k)))) stale.push_back(k);
  for (auto& k : stale) DP_TRY(peers.remove(k));
  return {};
}

Result<std::vector<Datapath::OperatorPin>> Datapath::commit(const Policy& next, const Staged& s) {
  auto decisions = skel_->dp_decisions();
  auto class_names = skel_->dp_class_names(), rail_names = skel_->dp_rail_names();
  auto rails = skel_->dp_rails();
  auto qos = skel_->dp_class_qos();
  auto nets = skel_->dp_rail_nets();
  for (size_t i = 0; i < next.paths.size(); ++i) {
    auto slot = static_cast<uint32_t>(s.rail_slot[i]);
    dp_rail r = encode_rail(next.paths[i], s.ifindex[i], true, next.topology, next.has_multipath());
    dp_rail_net net = encode_rail_net(next.paths[i], next.topology);
    DP_TRY(nets.update(slot, net));
    dp_local_addr local = encode_local_addr(next.paths[i], next.topology);
    DP_TRY(skel_->dp_local_addrs().update(slot, local));
    dp_slot_name n = encode_name(next.paths[i].name);
    DP_TRY(rails.update(slot, r));
    DP_TRY(rail_names.update(slot, n));
    DP_TRY(skel_->set_rail_ifindex(s.ifindex[i], slot));
  }
  DP_TRY(write_peers(next, s.rail_slot));
  udp_binds_.reset();  // the rails' addresses may have changed: look for servers again
  const int tcp_retries2 = dp::tcp_retries2();
  for (size_t i = 0; i < next.classes.size(); ++i) {
    const auto& cs = next.classes[i];
    auto slot = static_cast<uint32_t>(s.class_slot[i]);
    dp_decision cur{};
    bool known = s.existing_classes[slot] == cs.name && decisions.lookup(slot, &cur);
    // A known class keeps the decision it has until the controller settles
    // (right after the flip): written back to its preferred rail first, a
    // class moved off a failed rail would return there for that moment.
    uint32_t on_rails = 0;
    for (int rs : s.rail_slot) on_rails += cur.share[rs];
    bool keep = known && on_rails == DP_SHARE_SCALE;
    if (!keep) {
      int prefer = s.rail_slot[static_cast<size_t>(next.path_index(cs.prefer))];
      dp_decision d = decision_all_on(prefer, cs.pinned, ++decision_version_);
      DP_TRY(decisions.update(slot, d));
    }
    dp_slot_name n = encode_name(cs.name);
    DP_TRY(class_names.update(slot, n));
    dp_class_qos q = encode_qos(cs, next.qos);
    DP_TRY(qos.update(slot, q));
    dp_class_tcp ct = encode_class_tcp(cs, tcp_retries2);
    DP_TRY(skel_->dp_class_tcp().update(slot, ct));
  }
  uint32_t zero = 0;
  dp_config cfg{};
  cfg.active_gen = s.gen;
  cfg.default_class = s.enc.default_class;
  cfg.flowlet_gap_ns = static_cast<uint64_t>(next.scheduler.flowlet_gap.count());
  cfg.netns_cookie = netns_cookie_;
  // the generation about to be live classifies by cgroup from the flip on;
  // the other one's bit is kept until then
  bool by_cgroup =
      std::any_of(s.cgroups.begin(), s.cgroups.end(), [](auto& r) { return r.id != 0; });
  uint32_t gens = 0;
  (void)skel_->dp_cgroup_gens().lookup(zero, &gens);
  gens = by_cgroup ? gens | (1u << s.gen) : gens & ~(1u << s.gen);
  DP_TRY(set_cgroup_gens(gens));
  dp_mark_bits bits{next.routing.mark_mask, next.routing.redirect_mark};
  DP_TRY(skel_->dp_mark_bits().update(zero, bits));
  DP_TRY(skel_->dp_config().update(zero, cfg));
  flowlet_gap_ns_ = cfg.flowlet_gap_ns;
  gen_ = s.gen;

  // What the new policy no longer names.
  for (uint32_t slot = 0; slot < DP_MAX_CLASSES; ++slot) {
    if (contains(s.class_slot, slot)) continue;
    dp_slot_name empty{};
    dp_decision none{};
    dp_class_qos no_qos{};
    (void)class_names.update(slot, empty);
    (void)decisions.update(slot, none);
    (void)qos.update(slot, no_qos);
    dp_class_tcp no_tcp{};
    (void)skel_->dp_class_tcp().update(slot, no_tcp);
  }
  for (uint32_t slot = 0; slot < DP_MAX_RAILS; ++slot) {
    if (contains(s.rail_slot, slot)) continue;
    dp_slot_name empty{};
    dp_rail none{};
    dp_rail_net no_net{};
    (void)rail_names.update(slot, empty);
    (void)rails.update(slot, none);
    (void)nets.update(slot, no_net);
    dp_local_addr no_local{};
    (void)skel_->dp_local_addrs().update(slot, no_local);
  }
  auto owned = skel_->dp_owned();
  for (uint32_t idx : skel_->dp_ifindex().keys()) {
    if (std::find(s.ifindex.begin(), s.ifindex.end(), idx) != s.ifindex.end()) continue;
    char name[IF_NAMESIZE] = "?";
    if_indextoname(idx, name);
    auto r = Tc::detach(static_cast<int>(idx), name, &owned);
    if (!r) spdlog::warn("{}", r.error().str());
    (void)skel_->set_rail_ifindex(idx, std::nullopt);
  }

  class_slot_ = s.class_slot;
  sweep_ = {};  // what a sweep found was of the last generation's class slots
  swept_.clear();
  rail_slot_ = s.rail_slot;
  rail_ifindex_ = s.ifindex;
  vanished_.assign(s.ifindex.size(), false);
  // what commit wrote: every rail up, where the flag applies
  rails_up_.assign(next.topology == Topology::Shared && next.has_multipath() ? s.ifindex.size() : 0,
                   true);
  topology_ = next.topology;
  cgroups_ = s.cgroups;
  cgroup_cache_dirty_ = true;
  if (!cgroup_root_.empty()) {
    std::vector<std::string> keep;
    for (auto& c : next.classes) keep.push_back(c.name);
    remove_run_slices(cgroup_root_, next.node, keep);  // classes the policy dropped
  }

  std::vector<OperatorPin> pins;
  for (size_t i = 0; i < next.classes.size(); ++i) {
    auto d = decision(i);
    if (!d || !(d->flags & kOperatorPinned)) continue;
    OperatorPin pin{i, std::nullopt};
    if (auto r = decision_single_rail(*d))
      for (size_t p = 0; p < rail_slot_.size(); ++p)
        if (rail_slot_[p] == *r) pin.path = p;
    pins.push_back(pin);
  }
  return pins;
}

namespace {

RailState state_of(uint32_t v) {
  switch (v) {
    case DP_HEALTH_SUSPECT:
      return RailState::Suspect;
    case DP_HEALTH_DOWN:
      return RailState::Down;
    case DP_HEALTH_HOLDDOWN:
      return RailState::Holddown;
    case DP_HEALTH_RAMPING:
      return RailState::Ramping;
    case DP_HEALTH_DRAINED:
      return RailState::Drained;
    default:
      return RailState::Up;
  }
}

uint32_t encode_state(RailState s) {
  switch (s) {
    case RailState::Up:
      return DP_HEALTH_UP;
    case RailState::Suspect:
      return DP_HEALTH_SUSPECT;
    case RailState::Down:
      return DP_HEALTH_DOWN;
    case RailState::Holddown:
      return DP_HEALTH_HOLDDOWN;
    case RailState::Ramping:
      return DP_HEALTH_RAMPING;
    case RailState::Drained:
      return DP_HEALTH_DRAINED;
  }
  return DP_HEALTH_NONE;
}

}  // namespace

std::vector<std::optional<RailRecord>> Datapath::health_records(size_t classes) const {
  std::vector<std::optional<RailRecord>> out(rail_slot_.size());
  auto map = skel_->dp_health();
  for (size_t i = 0; i < rail_slot_.size(); ++i) {
    dp_rail_health h{};
    if (!map.lookup(static_cast<uint32_t>(rail_slot_[i]), &h) || h.state == DP_HEALTH_NONE)
      continue;
    RailRecord r{h.key, state_of(h.state), (h.flags & DP_HEALTH_F_BFD_SEEN) != 0, {}};
    r.former.assign(classes, 0);
    for (size_t c = 0; c < classes && c < class_slot_.size(); ++c)
      r.former[c] = h.former[class_slot_[c]] / double(DP_SHARE_SCALE);
    out[i] = std::move(r);
  }
  return out;
}

Result<void> Datapath::write_health(const std::vector<RailRecord>& records) {
  auto map = skel_->dp_health();
  for (size_t i = 0; i < records.size() && i < rail_slot_.size(); ++i) {
    dp_rail_health h{};
    h.state = encode_state(records[i].state);
    h.flags = records[i].bfd_seen ? DP_HEALTH_F_BFD_SEEN : 0;
    h.key = records[i].key;
    for (size_t c = 0; c < records[i].former.size() && c < class_slot_.size(); ++c)
      h.former[class_slot_[c]] = static_cast<__u16>(
          std::lround(std::clamp(records[i].former[c], 0.0, 1.0) * DP_SHARE_SCALE));
    DP_TRY(map.update(static_cast<uint32_t>(rail_slot_[i]), h));
  }
  return {};
}

Result<void> Datapath::write_decision(size_t klass, const Shares& shares, uint32_t flags) {
  auto slot = static_cast<uint32_t>(class_slot_.at(klass));
  dp_decision d{};
  for (size_t i = 0; i < shares.size() && i < rail_slot_.size(); ++i)
    d.share[static_cast<size_t>(rail_slot_[i])] = shares[i];
  d.flags = flags;
  d.version = ++decision_version_;
  return skel_->dp_decisions().update(slot, d);
}

Result<dp_decision> Datapath::decision(size_t klass) const {
  auto slot = static_cast<uint32_t>(class_slot_.at(klass));
  dp_decision d{};
  DP_TRY(skel_->dp_decisions().lookup(slot, &d));
  return d;
}

Result<void> Datapath::clear_operator_pin(size_t klass) {
  auto slot = static_cast<uint32_t>(class_slot_.at(klass));
  auto decisions = skel_->dp_decisions();
  dp_decision d{};
  DP_TRY(decisions.lookup(slot, &d));
  d.flags &= ~kOperatorPinned;
  d.version = ++decision_version_;
  return decisions.update(slot, d);
}

Result<void> Datapath::set_flowlet_gap(uint64_t ns) {
  uint32_t zero = 0;
  dp_config cfg{};
  auto m = skel_->dp_config();
  DP_TRY(m.lookup(zero, &cfg));
  cfg.flowlet_gap_ns = ns;
  DP_TRY(m.update(zero, cfg));
  flowlet_gap_ns_ = ns;
  return {};
}

Result<void> Datapath::write_cells(uint32_t shift, const std::vector<bool>& classes,
                                   const std::vector<uint32_t>& ns_per_kib, bool any_order,
                                   bool bursts) {
  dp_cell_cfg cc{};
  cc.cell_shift = bursts ? 0 : shift;
  cc.flags = (any_order ? DP_CELL_F_ANY_ORDER : 0) | (bursts ? DP_CELL_F_BURSTS : 0);
  for (size_t c = 0; c < classes.size() && c < class_slot_.size(); ++c)
    if (classes[c]) cc.class_mask |= 1u << class_slot_[c];
  for (size_t i = 0; i < ns_per_kib.size() && i < rail_slot_.size(); ++i)
    cc.ns_per_kib[static_cast<size_t>(rail_slot_[i])] = ns_per_kib[i];
  uint32_t zero = 0;
  return skel_->dp_cells().update(zero, cc);
}

Result<dp_cell_cfg> Datapath::cells() const {
  dp_cell_cfg cc{};
  uint32_t zero = 0;
  DP_TRY(skel_->dp_cells().lookup(zero, &cc));
  return cc;
}

namespace {

Datapath::FlowKeyBytes key_bytes(const dp_flow_key& k) {
  Datapath::FlowKeyBytes b;
  std::memcpy(b.data(), &k, sizeof(k));
  return b;
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // bpf_ktime_get_ns()
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// An ACK-only flow (the reverse of a bulk flow) has no bursts worth a plan:
// its packets average far below a data segment.
constexpr uint64_t kMinMeanPacket = 256;
// Nor has a flow whose bursts are smaller than this.
constexpr uint64_t kMinBurst = 16 << 10;

}  // namespace

std::optional<std::vector<PlannedFlow>> Datapath::burst_flows(const std::vector<bool>& classes,
                                                              std::chrono::nanoseconds active,
                                                              size_t budget) {
  std::array<size_t, DP_MAX_CLASSES> klass;
  klass.fill(BurstPlan::kNone);
  bool any = false;
  for (size_t c = 0; c < classes.size() && c < class_slot_.size(); ++c)
    if (classes[c] && class_slot_[c] >= 0 && class_slot_[c] < DP_MAX_CLASSES) {
      klass[static_cast<size_t>(class_slot_[c])] = c;
      any = true;
    }
  if (!any) {  // nothing to plan: a later sweep starts afresh
    sweep_ = {};
    swept_.clear();
    return std::vector<PlannedFlow>{};
  }
  const uint64_t now = monotonic_ns();
  const auto since = static_cast<uint64_t>(active.count());
  bool done = skel_->dp_flows().sweep(sweep_, budget, [&](const dp_flow_key& k, const dp_flow& f) {
    if (f.cls >= DP_MAX_CLASSES || klass[f.cls] == BurstPlan::kNone) return;
    if (f.last_seen_ns + since < now || !f.packets || f.bytes / f.packets < kMinMeanPacket) return;
    uint64_t burst = std::max(f.last_burst, f.burst_bytes);
    if (burst < kMinBurst) return;
    swept_.push_back({k, f.cls, f.rail, burst, f.flowlet, f.bytes, f.flags});
  });
  if (!done) return std::nullopt;

  std::array<size_t, DP_MAX_RAILS> path;
  path.fill(BurstPlan::kNone);
  for (size_t i = 0; i < rail_slot_.size(); ++i)
    if (rail_slot_[i] >= 0 && rail_slot_[i] < DP_MAX_RAILS)
      path[static_cast<size_t>(rail_slot_[i])] = i;
  // the table holds the largest bursts when there are more flows than it
  if (swept_.size() > DP_PLAN_TABLE_SIZE) {
    std::nth_element(swept_.begin(), swept_.begin() + DP_PLAN_TABLE_SIZE, swept_.end(),
                     [](const SweptFlow& a, const SweptFlow& b) { return a.burst > b.burst; });
    swept_.resize(DP_PLAN_TABLE_SIZE);
  }
  std::vector<PlannedFlow> out;
  out.reserve(swept_.size());
  for (const auto& f : swept_)
    if (klass[f.cls] != BurstPlan::kNone)  // a class may have stopped being split mid-sweep
      out.push_back(
          {f.key,
           {klass[f.cls], f.rail < DP_MAX_RAILS ? path[f.rail] : BurstPlan::kNone, f.burst},
           f.bursts,
           f.bytes,
           f.flags});
  swept_.clear();
  return out;
}

Result<void> Datapath::write_plans(const std::vector<PlannedFlow>& flows, const BurstPlan& plan) {
  auto m = skel_->dp_plans();
  if (!plans_read_) {  // what a previous process planned is ours to keep or delete
    for (auto& [k, v] : m.entries()) plans_[key_bytes(k)] = {v.rail, v.flags};
    plans_read_ = true;
  }
  std::map<FlowKeyBytes, std::pair<uint32_t, uint32_t>> want;
  for (size_t i = 0; i < flows.size() && i < plan.path.size(); ++i) {
    size_t p = plan.path[i];
    if (p == BurstPlan::kNone || p >= rail_slot_.size() || rail_slot_[p] < 0) continue;
    const uint32_t flags = i < plan.stream.size() && plan.stream[i] ? DP_PLAN_F_STREAM : 0;
    want[key_bytes(flows[i].key)] = {static_cast<uint32_t>(rail_slot_[p]), flags};
  }
  for (auto it = plans_.begin(); it != plans_.end();) {
    if (want.count(it->first)) {
      ++it;
      continue;
    }
    dp_flow_key k;
    std::memcpy(&k, it->first.data(), sizeof(k));
    DP_TRY(m.remove(k));
    it = plans_.erase(it);
  }
  for (auto& [kb, plan_of] : want) {
    auto it = plans_.find(kb);
    if (it != plans_.end() && it->second == plan_of) continue;
    dp_flow_key k;
    std::memcpy(&k, kb.data(), sizeof(k));
    dp_plan v{plan_of.first, ++plan_version_, plan_of.second};
    DP_TRY(m.update(k, v));
    plans_[kb] = plan_of;
  }
  return {};
}

Result<void> Datapath::set_rails_up(const std::vector<bool>& up) {
  if (rails_up_.empty() || up == rails_up_) return {};
  auto rails = skel_->dp_rails();
  for (size_t i = 0; i < up.size() && i < rail_slot_.size(); ++i) {
    auto slot = static_cast<uint32_t>(rail_slot_[i]);
    dp_rail r{};
    DP_TRY(rails.lookup(slot, &r));
    uint32_t flags = up[i] && (r.flags & DP_RAIL_F_ENABLED) ? r.flags | DP_RAIL_F_MP_UP
                                                            : r.flags & ~uint32_t{DP_RAIL_F_MP_UP};
    if (flags == r.flags) continue;
    r.flags = flags;
    DP_TRY(rails.update(slot, r));
  }
  rails_up_ = up;
  return {};
}

Result<void> Datapath::write_police(const std::vector<RailPolice>& rails) {
  std::vector<dp_police> want(DP_MAX_RAILS);
  for (size_t i = 0; i < rails.size() && i < rail_slot_.size(); ++i) {
    auto& w = want[static_cast<size_t>(rail_slot_[i])];
    if (!rails[i].rate_bps) continue;
    w.rate = rails[i].rate_bps / 8;
    w.burst = police_burst_bytes(rails[i].rate_bps);
    for (size_t c = 0; c < rails[i].policed.size() && c < class_slot_.size(); ++c)
      if (rails[i].policed[c]) w.classes |= 1u << class_slot_[c];
  }
  // the first write covers every slot: pins adopted from an earlier run may hold a policer
  bool first = police_.size() != want.size();
  if (first) police_.assign(want.size(), dp_police{});
  auto police = skel_->dp_police();
  for (uint32_t slot = 0; slot < want.size(); ++slot) {
    const auto& w = want[slot];
    auto& had = police_[slot];
    if (!first && w.rate == had.rate && w.burst == had.burst && w.classes == had.classes) continue;
    dp_police v = w;
    v.tokens = static_cast<__s64>(v.burst) * 1000000000;  // a new rate starts with a full bucket
    DP_TRY(police.update(slot, v));
    had = w;
  }
  return {};
}

Result<void> Datapath::note_join_listener(const IpAddr& addr, uint16_t port,
                                          std::optional<size_t> klass) {
  dp_listen_key k{};
  std::memcpy(k.addr, addr.bytes.data(), addr.family == AF_INET6 ? 16 : 4);
  k.port = port;
  k.proto = IPPROTO_TCP;
  k.family = static_cast<__u8>(addr.family);
  auto joins = skel_->dp_joins();
  if (!klass) {
    (void)joins.remove(k);  // none there already is fine
    return {};
  }
  if (*klass >= class_slot_.size() || class_slot_[*klass] < 0)
    return DP_SYS_ERROR(EINVAL, "a join listener for class {}, which the policy lacks", *klass);
  return joins.update(k, static_cast<uint32_t>(class_slot_[*klass]));
}

void Datapath::forget_join_listeners() {
  auto joins = skel_->dp_joins();
  for (const auto& k : joins.keys()) (void)joins.remove(k);
}

std::vector<dp_police_drops> Datapath::police_drops() const {
  std::vector<dp_police_drops> out(rail_slot_.size());
  auto drops = skel_->dp_police_drops();
  for (size_t i = 0; i < rail_slot_.size(); ++i) {
    auto v = drops.lookup(static_cast<uint32_t>(rail_slot_[i]));
    if (!v) continue;
    for (const auto& cpu : *v) {
      out[i].packets += cpu.packets;
      out[i].bytes += cpu.bytes;
    }
  }
  return out;
}

bool Datapath::check_present(size_t path, const PathSpec& ps) {
  if (path >= vanished_.size() || vanished_[path]) return false;
  if (ifindex_of(ps.interface) == rail_ifindex_[path]) return false;
  auto slot = static_cast<uint32_t>(rail_slot_[path]);
  dp_rail r = encode_rail(ps, rail_ifindex_[path], false, topology_);
  auto ok = skel_->dp_rails().update(slot, r);
  vanished_[path] = ok.ok();
  spdlog::error("interface {} of path {} is gone: the path is no longer a redirect target{}",
                ps.interface, ps.name,
                ok ? "; reload the policy once it is back" : ": " + ok.error().what());
  return vanished_[path];
}

void Datapath::read(CounterTable& counters, ExceptionTable& exceptions, TcpTable& tcp) const {
  auto cm = skel_->dp_counters();
  auto em = skel_->dp_exceptions();
  auto tm = skel_->dp_tcp();
  for (uint32_t r = 0; r < DP_MAX_RAILS; ++r) {
    for (uint32_t c = 0; c < DP_MAX_CLASSES; ++c) {
      uint32_t key = r * DP_MAX_CLASSES + c;
      if (auto v = cm.lookup(key)) counters[r][c] = sum_counters(*v);
    }
    for (uint32_t e = 0; e < DP_EXC_MAX; ++e) {
      uint32_t key = r * DP_EXC_MAX + e;
      auto v = em.lookup(key);
      if (!v) continue;
      uint64_t sum = 0;
      for (auto x : *v) sum += x;
      exceptions[r][e] = sum;
    }
  }
  for (uint32_t r = 0; r < DP_MAX_RAILS; ++r)
    for (uint32_t c = 0; c < DP_MAX_CLASSES; ++c) {
      uint32_t key = r * DP_MAX_CLASSES + c;
      if (auto v = tm.lookup(key)) tcp[r][c] = sum_tcp(*v);
    }
}

ConnectTable Datapath::connects() const {
  ConnectTable out{};
  auto m = skel_->dp_connects();
  for (uint32_t r = 0; r <= DP_MAX_RAILS; ++r)
    for (uint32_t c = 0; c < DP_MAX_CLASSES; ++c) {
      uint32_t key = r * DP_MAX_CLASSES + c;
      auto v = m.lookup(key);
      if (!v) continue;
      for (auto x : *v) out[r][c] += x;
    }
  return out;
}

std::array<uint64_t, DP_MAX_RAILS> Datapath::handovers() const {
  std::array<uint64_t, DP_MAX_RAILS> out{};
  auto m = skel_->dp_handovers();
  for (uint32_t r = 0; r < DP_MAX_RAILS; ++r) {
    auto v = m.lookup(r);
    if (v)
      for (auto x : *v) out[r] += x;
  }
  return out;
}

void Datapath::note_udp_servers() {
  auto binds = skel_->dp_udp_binds().get(0);
  if (!binds || (udp_binds_ && *udp_binds_ == *binds)) return;
  if (!skel_->program("dp_udp_servers")) return;
  if (auto r = run_iter(pin_dir_, "udp_servers"); !r) {
    spdlog::warn("finding the UDP servers bound to a rail's address failed: {}", r.error().what());
    return;  // tried again next tick
  }
  udp_binds_ = *binds;
}

std::vector<FlowRow> Datapath::flows(size_t* total) const {
  auto flows = skel_->dp_flows();
  std::vector<FlowRow> rows;
  for (auto& [k, f] : flows.entries()) rows.push_back({k, f});
  *total = rows.size();
  return rows;
}

const std::string& Datapath::mptcp_conversion_error() const {
  return skel_->refused("dp_update_socket_protocol");
}

std::optional<size_t> Datapath::flow_class(const IpAddr& local, uint16_t lport,
                                           const IpAddr& remote, uint16_t rport) const {
  auto f = find_flow(local, lport, remote, rport);
  if (!f) return std::nullopt;
  for (size_t c = 0; c < class_slot_.size(); ++c)
    if (class_slot_[c] == f->cls) return c;
  return std::nullopt;
}

std::optional<size_t> Datapath::flow_path(const IpAddr& local, uint16_t lport, const IpAddr& remote,
                                          uint16_t rport) const {
  auto f = find_flow(local, lport, remote, rport);
  if (!f) return std::nullopt;
  for (size_t p = 0; p < rail_slot_.size(); ++p)
    if (rail_slot_[p] >= 0 && static_cast<uint32_t>(rail_slot_[p]) == f->rail) return p;
  return std::nullopt;
}

uint64_t Datapath::flow_bytes(const IpAddr& local, uint16_t lport, const IpAddr& remote,
                              uint16_t rport) const {
  auto f = find_flow(local, lport, remote, rport);
  return f ? f->bytes : 0;
}

std::optional<dp_flow> Datapath::find_flow(const IpAddr& local, uint16_t lport,
                                           const IpAddr& remote, uint16_t rport) const {
  auto flows = skel_->dp_flows();
  auto key_of = [](const IpAddr& s, uint16_t sp, const IpAddr& d, uint16_t dp) {
    dp_flow_key k{};  // IPv4 as v4-mapped IPv6, as the datapath keys it
    auto put = [](__u32* w, const IpAddr& a) {
      if (a.family == AF_INET6) {
        std::memcpy(w, a.bytes.data(), 16);
        return;
      }
      w[2] = htonl(0xffff);
      std::memcpy(&w[3], a.bytes.data(), 4);
    };
    put(k.saddr, s);
    put(k.daddr, d);
    k.sport = htons(sp);
    k.dport = htons(dp);
    k.proto = IPPROTO_TCP;
    return k;
  };
  for (const auto& k : {key_of(local, lport, remote, rport), key_of(remote, rport, local, lport)}) {
    dp_flow f{};
    if (flows.lookup(k, &f)) return f;
  }
  return std::nullopt;
}

std::optional<TcView> Datapath::tc(int ifindex) const {
  auto owned = skel_->dp_owned();
  auto st = Tc::status(ifindex, &owned);
  if (!st) return std::nullopt;
  return TcView{st->egress_prog_id, st->ingress_prog_id, st->clsact_owned};
}

unsigned Datapath::ifindex_of(const std::string& ifname) const {
  ifreq ifr{};
  if (ifreq_fd_.get() < 0 || ifname.size() >= sizeof(ifr.ifr_name))
    return if_nametoindex(ifname.c_str());
  std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
  if (::ioctl(ifreq_fd_.get(), SIOCGIFINDEX, &ifr) != 0) return 0;
  return static_cast<unsigned>(ifr.ifr_ifindex);
}

Result<void> Datapath::cleanup(const Policy& p, const std::string& bpffs_root) {
  std::string dir = pin_dir(bpffs_root, p.node);
  std::optional<dp_owned_map> owned;
  Fd owned_fd(bpf_obj_get((std::filesystem::path(dir) / "dp_owned").c_str()));
  if (owned_fd.valid()) owned.emplace(owned_fd.get(), "dp_owned");
  // the tc filters on each rail; every other program goes with its link's pin
  for (auto& ps : p.paths) {
    unsigned idx = if_nametoindex(ps.interface.c_str());
    if (!idx) continue;
    DP_TRY(Tc::detach(static_cast<int>(idx), ps.interface, owned ? &*owned : nullptr));
  }
  for (const auto& spec : kPrograms)
    if (!is_tc(spec)) DP_TRY(detach_pinned(dir, std::string(spec.pin)));
  auto routed = Routing::remove(p);
  if (!routed) return routed.error();
  spdlog::info("removed {} rules and routes of node {}", routed->removed, p.node);
  DP_TRY(remove_pin_dir(dir));
  if (auto root = cgroup2_root()) remove_run_slices(*root, p.node);
  return {};
}

}  // namespace dp
