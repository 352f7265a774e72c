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

Result<void> BpfMap::update_raw(const void* key, const void* value, uint64_t flags) const {
  if (bpf_map_update_elem(fd_, key, value, flags) != 0)
    return DP_SYS_ERROR(errno, "update of map {} failed", name_);
  return {};
}

Result<void> BpfMap::lookup_raw(const void* key, void* value) const {
  if (bpf_map_lookup_elem(fd_, key, value) != 0)
    return DP_SYS_ERROR(errno, "lookup in map {} failed", name_);
  return {};
}

Result<void> BpfMap::remove_raw(const void* key) const {
  if (bpf_map_delete_elem(fd_, key) != 0 && errno != ENOENT)
    return DP_SYS_ERROR(errno, "delete from map {} failed", name_);
  return {};
}

// ---------------------------------------------------------------- programs

std::string pin_name(const ProgramSpec& p) {
  return std::string(is_tc(p) ? "prog_" : "link_") + std::string(p.pin);
}

const ProgramSpec* program_spec(std::string_view name) {
  for (const auto& p : kPrograms)
    if (p.name == name) return &p;
  return nullptr;
}

// ---------------------------------------------------------------- skeleton

namespace {

// Whether this kernel loads an fmod_ret program on `func`: the function must
// exist (update_socket_protocol: Linux 6.6) and the kernel must allow BPF
// trampolines (some virtual machines' kernels refuse them with EPERM).
// Returns "" if it does, else why not.
std::string probe_fmod_ret(const std::string& func) {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return "the kernel has no BTF";
  int id = btf__find_by_name_kind(vmlinux, func.c_str(), BTF_KIND_FUNC);
  btf__free(vmlinux);
  if (id <= 0) return fmt::format("the kernel has no {} (Linux 6.6 or later)", func);
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},  // r0 = 0
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = BPF_MODIFY_RETURN,
              .attach_btf_id = static_cast<__u32>(id));
  int fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, "dp_probe_fmodret", "GPL", insns, 2, &o);
  if (fd < 0)
    return fmt::format("the kernel refuses an fmod_ret program on {}: {}", func,
                       std::strerror(errno));
  ::close(fd);
  return "";
}

}  // namespace

// The object's programs against kPrograms: each in the table, each of the
// table in the object. "" if they agree.
std::string check_programs(bpf_object* obj) {
  std::string wrong;
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, obj) {
    if (!program_spec(bpf_program__name(prog)))
      wrong += fmt::format("{}program {} has no entry in kPrograms", wrong.empty() ? "" : "; ",
                           bpf_program__name(prog));
  }
  for (const auto& p : kPrograms)
    if (!bpf_object__find_program_by_name(obj, std::string(p.name).c_str()))
      wrong += fmt::format("{}kPrograms names {}, which the object lacks",
                           wrong.empty() ? "" : "; ", p.name);
  return wrong;
}

Result<std::unique_ptr<DpSkeleton>> DpSkeleton::load(const std::string& pin_root) {
  LIBBPF_OPTS(bpf_object_open_opts, opts);
  if (!pin_root.empty()) opts.pin_root_path = pin_root.c_str();
  dp_tc* s = dp_tc__open_opts(&opts);
  if (!s) return DP_SYS_ERROR(errno, "opening the dualpath BPF object failed");
  std::unique_ptr<DpSkeleton> owner(new DpSkeleton(s));
  if (auto wrong = check_programs(s->obj); !wrong.empty())
    return DP_ERROR("the BPF object and the program table (kernel/programs.h) differ: {}", wrong);
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
  // An optional program whose hook this kernel lacks or refuses is not
  // loaded; the rest still is (fmod_ret on update_socket_protocol needs Linux
  // 6.6 and a kernel that allows trampolines)
  for (const auto& p : kPrograms) {
    if (!p.optional) continue;
    bpf_program* prog = bpf_object__find_program_by_name(s->obj, std::string(p.name).c_str());
    std::string section = bpf_program__section_name(prog);
    std::string why = p.hook == Hook::Trace ? probe_fmod_ret(section.substr(section.find('/') + 1))
                                            : std::string();
    if (why.empty()) continue;
    bpf_program__set_autoload(prog, false);
    owner->refused_.emplace(std::string(p.name), why);
  }
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

bpf_program* DpSkeleton::program(std::string_view name) const {
  if (refused_.count(name)) return nullptr;
  return bpf_object__find_program_by_name(skel_->obj, std::string(name).c_str());
}

const std::string& DpSkeleton::refused(std::string_view name) const {
  static const std::string none;
  auto it = refused_.find(name);
  return it == refused_.end() ? none : it->second;
}

int DpSkeleton::egress_fd() const { return bpf_program__fd(skel_->progs.dp_egress); }
int DpSkeleton::ingress_fd() const { return bpf_program__fd(skel_->progs.dp_ingress); }

// Each map's accessor: a map of the list that the object lacks does not compile.
#define DP_MAP_ACCESSOR(name_, type_, max_, key_, value_) \
  name_##_map DpSkeleton::name_() const { return {bpf_map__fd(skel_->maps.name_), #name_}; }
DP_MAPS(DP_MAP_ACCESSOR)
#undef DP_MAP_ACCESSOR

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
  auto hash = dp_ifindex();
  if (index < DP_IFINDEX_DIRECT) DP_TRY(dp_rail_by_ifindex().update(index, slot ? *slot + 1 : 0));
  if (!slot) return hash.remove(index);
  return hash.update(index, dp_ifindex_val{*slot});
}

}  // namespace dp
