// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/bpf_skeleton.h"

#include <linux/magic.h>
#include <linux/pkt_sched.h>
#include <netlink/netlink.h>
#include <netlink/route/classifier.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/socket.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <bpf/btf.h>

#include "dp_tc.skel.h"

namespace dp {

// ---------------------------------------------------------------- BpfMap

Result<void> BpfMap::update(const void* key, const void* value, uint64_t flags) const {
  if (bpf_map_update_elem(fd_, key, value, flags) != 0)
    return DP_SYS_ERROR(errno, "update of map {} failed", name_);
  return {};
}

Result<void> BpfMap::lookup(const void* key, void* value) const {
  if (bpf_map_lookup_elem(fd_, key, value) != 0)
    return DP_SYS_ERROR(errno, "lookup in map {} failed", name_);
  return {};
}

Result<void> BpfMap::remove(const void* key) const {
  if (bpf_map_delete_elem(fd_, key) != 0 && errno != ENOENT)
    return DP_SYS_ERROR(errno, "delete from map {} failed", name_);
  return {};
}

// ---------------------------------------------------------------- skeleton

namespace {

// Whether this kernel loads an fmod_ret program on update_socket_protocol:
// the function must exist (Linux 6.6) and the kernel must allow BPF
// trampolines (some virtual machines' kernels refuse them with EPERM).
// Returns "" if it does, else why not.
std::string probe_mptcpify() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return "the kernel has no BTF";
  int id = btf__find_by_name_kind(vmlinux, "update_socket_protocol", BTF_KIND_FUNC);
  btf__free(vmlinux);
  if (id <= 0) return "the kernel has no update_socket_protocol (Linux 6.6 or later)";
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},  // r0 = 0
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = BPF_MODIFY_RETURN,
              .attach_btf_id = static_cast<__u32>(id));
  int fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, "dp_probe_fmodret", "GPL", insns, 2, &o);
  if (fd < 0)
    return fmt::format("the kernel refuses an fmod_ret program on update_socket_protocol: {}",
                       std::strerror(errno));
  ::close(fd);
  return "";
}

}  // namespace

Result<std::unique_ptr<DpSkeleton>> DpSkeleton::load(const std::string& pin_root,
                                                     const Options& o) {
  LIBBPF_OPTS(bpf_object_open_opts, opts);
  if (!pin_root.empty()) opts.pin_root_path = pin_root.c_str();
  dp_tc* s = dp_tc__open_opts(&opts);
  if (!s) return DP_SYS_ERROR(errno, "opening the dualpath BPF object failed");
  std::unique_ptr<DpSkeleton> owner(new DpSkeleton(s));
  s->rodata->dp_bench_tstamp_any = o.bench_tstamp_any ? 1 : 0;
  if (pin_root.empty()) {
    bpf_map* m = nullptr;
    bpf_object__for_each_map(m, s->obj) {
      if (bpf_map__set_pin_path(m, nullptr) != 0)
        return DP_SYS_ERROR(errno, "clearing the pin path of map {} failed", bpf_map__name(m));
    }
  }
  // A pinned map of another layout (an earlier build) is not reused: this
  // build's map is created unpinned beside it, and LayoutUpgrade carries the
  // old one's contents over (upgrade.h).
  std::vector<std::pair<bpf_map*, StaleMap>> stale;
  if (!pin_root.empty()) {
    bpf_map* m = nullptr;
    bpf_object__for_each_map(m, s->obj) {
      const char* pin = bpf_map__pin_path(m);
      if (!pin || ::access(pin, F_OK) != 0) continue;
      Fd old(bpf_obj_get(pin));
      bpf_map_info info{};
      uint32_t len = sizeof(info);
      if (!old.valid() || bpf_obj_get_info_by_fd(old.get(), &info, &len) != 0)
        return DP_SYS_ERROR(errno, "reading the pinned map {} failed", pin);
      if (info.type == bpf_map__type(m) && info.key_size == bpf_map__key_size(m) &&
          info.value_size == bpf_map__value_size(m) &&
          info.max_entries == bpf_map__max_entries(m) && info.map_flags == bpf_map__map_flags(m))
        continue;
      StaleMap sm{bpf_map__name(m), pin, std::move(old), -1};
      if (bpf_map__set_pin_path(m, nullptr) != 0)
        return DP_SYS_ERROR(errno, "clearing the pin path of map {} failed", bpf_map__name(m));
      stale.emplace_back(m, std::move(sm));
    }
  }
  // fmod_ret on update_socket_protocol needs Linux 6.6: without the hook the
  // rest still loads, and multipath classes are refused at apply
  owner->mptcpify_error_ = probe_mptcpify();
  owner->mptcpify_ = owner->mptcpify_error_.empty();
  if (!owner->mptcpify_) bpf_program__set_autoload(s->progs.dp_update_socket_protocol, false);
  int err = dp_tc__load(s);
  if (err != 0)
    return DP_SYS_ERROR(err, "loading the BPF programs failed (the verifier log is above)");
  for (auto& [m, sm] : stale) {
    sm.fresh = bpf_map__fd(m);
    owner->stale_.push_back(std::move(sm));
  }
  return owner;
}

DpSkeleton::~DpSkeleton() { dp_tc__destroy(skel_); }

int DpSkeleton::egress_fd() const { return bpf_program__fd(skel_->progs.dp_egress); }
int DpSkeleton::ingress_fd() const { return bpf_program__fd(skel_->progs.dp_ingress); }
int DpSkeleton::empty_fd() const { return bpf_program__fd(skel_->progs.dp_empty); }
bpf_program* DpSkeleton::sockops_prog() const { return skel_->progs.dp_sockops; }
bpf_program* DpSkeleton::sk_lookup_prog() const { return skel_->progs.dp_sk_lookup; }
bpf_program* DpSkeleton::mptcpify_prog() const {
  return mptcpify_ ? skel_->progs.dp_update_socket_protocol : nullptr;
}

std::vector<std::pair<bpf_program*, std::string>> DpSkeleton::sock_addr_progs() const {
  auto& p = skel_->progs;
  return {{p.dp_connect4, "connect4"},         {p.dp_connect6, "connect6"},
          {p.dp_sendmsg4, "sendmsg4"},         {p.dp_sendmsg6, "sendmsg6"},
          {p.dp_getpeername4, "getpeername4"}, {p.dp_getpeername6, "getpeername6"},
          {p.dp_recvmsg4, "recvmsg4"},         {p.dp_recvmsg6, "recvmsg6"},
          {p.dp_getsockname4, "getsockname4"}, {p.dp_getsockname6, "getsockname6"},
          {p.dp_sock_release, "sock_release"}};
}

#define DP_SKELETON_MAP(name)                                       \
  BpfMap DpSkeleton::name() const {                                 \
    return BpfMap(bpf_map__fd(skel_->maps.dp_##name), "dp_" #name); \
  }
DP_SKELETON_MAP(ports)
DP_SKELETON_MAP(marks)
DP_SKELETON_MAP(config)
DP_SKELETON_MAP(rails)
DP_SKELETON_MAP(ifindex)
DP_SKELETON_MAP(rail_by_ifindex)
DP_SKELETON_MAP(decisions)
DP_SKELETON_MAP(class_names)
DP_SKELETON_MAP(class_qos)
DP_SKELETON_MAP(rail_names)
DP_SKELETON_MAP(counters)
DP_SKELETON_MAP(exceptions)
DP_SKELETON_MAP(tcp)
DP_SKELETON_MAP(flows)
DP_SKELETON_MAP(owned)
DP_SKELETON_MAP(rail_nets)
DP_SKELETON_MAP(peers)
DP_SKELETON_MAP(sock_orig)
DP_SKELETON_MAP(connects)
DP_SKELETON_MAP(cgroups)
DP_SKELETON_MAP(cgroup_cache)
DP_SKELETON_MAP(cgroup_gens)
DP_SKELETON_MAP(mark_bits)
DP_SKELETON_MAP(class_tcp)
DP_SKELETON_MAP(cells)
DP_SKELETON_MAP(vq)
DP_SKELETON_MAP(plans)
DP_SKELETON_MAP(abi)
DP_SKELETON_MAP(local_addrs)
DP_SKELETON_MAP(listeners)
DP_SKELETON_MAP(handovers)
DP_SKELETON_MAP(handed)
#undef DP_SKELETON_MAP

std::vector<std::string> DpSkeleton::pinned_map_names() const {
  std::vector<std::string> out;
  bpf_map* m = nullptr;
  bpf_object__for_each_map(m, skel_->obj) {
    if (bpf_map__is_internal(m)) continue;  // .rodata, .bss: never pinned
    out.emplace_back(bpf_map__name(m));
  }
  return out;
}

Result<void> DpSkeleton::set_rail_ifindex(uint32_t index, std::optional<uint32_t> slot) const {
  BpfMap hash = ifindex();
  if (index < DP_IFINDEX_DIRECT) {
    uint32_t v = slot ? *slot + 1 : 0;
    DP_TRY(rail_by_ifindex().update(&index, &v));
  }
  if (!slot) return hash.remove(&index);
  dp_ifindex_val v{*slot};
  return hash.update(&index, &v);
}

}  // namespace dp
