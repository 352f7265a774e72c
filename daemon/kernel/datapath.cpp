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
#include <utility>

#include <spdlog/spdlog.h>

#include "dualpath/kernel/node_checks.h"
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

// The policy's rails into their slots: the rail, its networks and local
// addresses, its name, and its interface's slot.
Result<void> Datapath::commit_rails(const Policy& next, const Staged& s) {
  auto rails = skel_->dp_rails();
  auto rail_names = skel_->dp_rail_names();
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
  return {};
}

// The policy's classes into their slots: a decision for a class new to its
// slot, and every class's name, QoS and TCP settings.
Result<void> Datapath::commit_classes(const Policy& next, const Staged& s) {
  auto decisions = skel_->dp_decisions();
  auto class_names = skel_->dp_class_names();
  auto qos = skel_->dp_class_qos();
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
  return {};
}

// The flip: dp_config names the staged generation live, with the policy's
// default class, flowlet gap and mark bits.
Result<void> Datapath::commit_config(const Policy& next, const Staged& s) {
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
  return {};
}

// What the new policy no longer names: its class and rail slots emptied, and
// the tc programs of interfaces that are no longer rails detached. Best
// effort: the new policy is live already.
void Datapath::clear_unnamed(const Staged& s) {
  auto decisions = skel_->dp_decisions();
  auto class_names = skel_->dp_class_names(), rail_names = skel_->dp_rail_names();
  auto rails = skel_->dp_rails();
  auto qos = skel_->dp_class_qos();
  auto nets = skel_->dp_rail_nets();
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
}

// This object's view of the datapath follows the committed policy: slots,
// interfaces, topology and cgroups.
void Datapath::adopt_committed(const Policy& next, const Staged& s) {
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
}

Result<std::vector<Datapath::OperatorPin>> Datapath::commit(const Policy& next, const Staged& s) {
  DP_TRY(commit_rails(next, s));
  DP_TRY(write_peers(next, s.rail_slot));
  // the rails' addresses may have changed: look for servers again
  udp_binds_.reset();
  tcp_listeners_due_ = true;
  DP_TRY(commit_classes(next, s));
  DP_TRY(commit_config(next, s));
  clear_unnamed(s);
  adopt_committed(next, s);

  // the classes an operator pinned, for the controller to keep pinned
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

void Datapath::note_servers() {
  if (tcp_listeners_due_) {
    tcp_listeners_due_ = false;
    note_tcp_listeners();
  }
  auto binds = skel_->dp_udp_binds().get(0);
  if (!binds || (udp_binds_ && *udp_binds_ == *binds)) return;
  if (!skel_->program("dp_udp_servers")) return;
  if (auto r = run_iter(pin_dir_, "udp_servers"); !r) {
    spdlog::warn("finding the UDP servers bound to a rail's address failed: {}", r.error().what());
    return;  // tried again next tick
  }
  udp_binds_ = *binds;
}

void Datapath::note_tcp_listeners() {
  if (!skel_->program("dp_tcp_listeners")) return;
  // Before Linux 6.5 the TCP iterator holds the socket's spinlock while the
  // program runs, and the SOCKHASH update takes it again: a listener from
  // before the start is then handed over only once it listens again.
  if (!running_kernel_at_least(6, 5)) {
    static bool said = false;  // once per process, not at every reload
    if (std::exchange(said, true)) return;
    spdlog::info(
        "TCP listeners that were bound to a rail's address before dualpathd attached are not "
        "handed connections placed on another rail until they listen again (Linux 6.5 finds "
        "them)");
    return;
  }
  if (auto r = run_iter(pin_dir_, "tcp_listeners"); !r)
    spdlog::warn("finding the TCP listeners bound to a rail's address failed: {}",
                 r.error().what());
}

const std::string& Datapath::mptcp_conversion_error() const {
  return skel_->refused("dp_update_socket_protocol");
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
