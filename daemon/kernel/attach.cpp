// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/attach.h"

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

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "dualpath/kernel/netlink.h"

namespace dp {

// ---------------------------------------------------------------- sockops

Result<std::string> cgroup2_root() {
  std::ifstream mounts("/proc/self/mounts");
  std::string dev, dir, type;
  std::string rest;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest))
    if (type == "cgroup2") return dir;
  return DP_SYS_ERROR(ENOENT, "no cgroup v2 hierarchy is mounted (sockops needs one)");
}

Result<uint64_t> netns_cookie() {
  Fd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  uint64_t cookie = 0;
  socklen_t len = sizeof(cookie);
  if (!s.valid() || getsockopt(s.get(), SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0)
    return DP_SYS_ERROR(errno, "reading this network namespace's cookie failed");
  return cookie;
}

namespace {

// The link pinned at pin_dir/link_<what>: adopted when `ours` says it is
// this attachment (a restart or an upgrade: the program is swapped in
// place), else made with `attach` and pinned (a pin of another attachment,
// such as another cgroup after a policy change, is replaced).
Result<void> pinned_link(bpf_program* prog, const std::string& pin_dir, const std::string& what,
                         const std::function<bool(const bpf_link_info&)>& ours,
                         const std::function<Result<bpf_link*>()>& attach) {
  std::string pin = (std::filesystem::path(pin_dir) / ("link_" + what)).string();
  if (std::filesystem::exists(pin)) {
    Fd link(bpf_obj_get(pin.c_str()));
    bpf_link_info info{};
    uint32_t len = sizeof(info);
    if (link.valid() && bpf_obj_get_info_by_fd(link.get(), &info, &len) == 0 && ours(info)) {
      if (bpf_link_update(link.get(), bpf_program__fd(prog), nullptr) != 0)
        return DP_SYS_ERROR(errno, "updating the {} link at {} failed", what, pin);
      return {};
    }
    // A pin that cannot be removed is said as such, before anything is
    // attached beside it. On a bpffs mounted read-only, a pinned link cannot
    // even be opened (the kernel opens links for writing only), so a reload
    // (it swaps each link's program) is refused there, and the running
    // policy stays.
    if (::unlink(pin.c_str()) != 0 && errno != ENOENT)
      return DP_SYS_ERROR(errno, "replacing the {} link pinned at {} failed", what, pin);
  }
  auto made = attach();
  if (!made) return made.error();
  bpf_link* link = *made;
  // the pin holds the attachment now: destroying the bpf_link closes this
  // process's descriptor only (a link that lives in the kernel is detached
  // when its last reference goes, the pin's), so that removing the pin
  // detaches it even while the daemon runs. (bpf_link__disconnect would
  // keep the descriptor open, and the attachment with it, until exit.)
  // An attachment that could not be pinned goes with the descriptor: nothing
  // could find it to remove it later.
  int err = bpf_link__pin(link, pin.c_str());
  bpf_link__destroy(link);
  if (err != 0) return DP_SYS_ERROR(err, "pinning the {} link at {} failed", what, pin);
  return {};
}

}  // namespace

Result<void> attach_cgroup(bpf_program* prog, const std::string& cgroup, const std::string& pin_dir,
                           const std::string& what) {
  struct stat cg {};
  if (::stat(cgroup.c_str(), &cg) != 0)
    return DP_SYS_ERROR(errno, "cgroup {} for {} is not accessible", cgroup, what);
  return pinned_link(
      prog, pin_dir, what,
      [&](const bpf_link_info& info) {
        return info.type == BPF_LINK_TYPE_CGROUP && info.cgroup.cgroup_id == cg.st_ino;
      },
      [&]() -> Result<bpf_link*> {
        Fd cgfd(::open(cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!cgfd.valid()) return DP_SYS_ERROR(errno, "opening cgroup {} failed", cgroup);
        bpf_link* link = bpf_program__attach_cgroup(prog, cgfd.get());
        if (!link) return DP_SYS_ERROR(errno, "attaching {} to cgroup {} failed", what, cgroup);
        return link;
      });
}

Result<void> attach_netns(bpf_program* prog, const std::string& pin_dir, const std::string& what) {
  Fd ns(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!ns.valid() || ::fstat(ns.get(), &st) != 0)
    return DP_SYS_ERROR(errno, "opening this network namespace for {} failed", what);
  return pinned_link(
      prog, pin_dir, what,
      [&](const bpf_link_info& info) {
        return info.type == BPF_LINK_TYPE_NETNS && info.netns.netns_ino == st.st_ino;
      },
      [&]() -> Result<bpf_link*> {
        bpf_link* link = bpf_program__attach_netns(prog, ns.get());
        if (!link)
          return DP_SYS_ERROR(errno, "attaching {} to this network namespace failed", what);
        return link;
      });
}

namespace {

// A link that cannot be updated in place (tracing, iterators), pinned at
// pin_dir/link_<what>: a pinned link of this very program is kept; another
// (an earlier build's) is replaced once `make` made the new one.
template <class Make>
Result<void> replace_link(bpf_program* prog, const std::string& pin_dir, const std::string& what,
                          Make make) {
  std::string pin = (std::filesystem::path(pin_dir) / ("link_" + what)).string();
  bpf_prog_info mine{};
  uint32_t mine_len = sizeof(mine);
  if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &mine, &mine_len) != 0)
    return DP_SYS_ERROR(errno, "reading the {} program's id failed", what);
  if (std::filesystem::exists(pin)) {
    Fd link(bpf_obj_get(pin.c_str()));
    bpf_link_info info{};
    uint32_t len = sizeof(info);
    if (link.valid() && bpf_obj_get_info_by_fd(link.get(), &info, &len) == 0 &&
        info.prog_id == mine.id)
      return {};
  }
  bpf_link* link = make();
  if (!link) return DP_SYS_ERROR(errno, "attaching {} failed", what);
  // (bpffs refuses a name with a dot in it: EPERM)
  std::string fresh = pin + "_new";
  ::unlink(fresh.c_str());
  int err = bpf_link__pin(link, fresh.c_str());
  bpf_link__destroy(link);
  if (err != 0) return DP_SYS_ERROR(err, "pinning the {} link at {} failed", what, fresh);
  // the old link (if any) goes with its pin, after the new one is in place
  if (::rename(fresh.c_str(), pin.c_str()) != 0) {
    int e = errno;
    ::unlink(fresh.c_str());
    return DP_SYS_ERROR(e, "moving the {} link's pin to {} failed", what, pin);
  }
  return {};
}

}  // namespace

Result<void> attach_trace(bpf_program* prog, const std::string& pin_dir, const std::string& what) {
  return replace_link(prog, pin_dir, what, [&] { return bpf_program__attach_trace(prog); });
}

Result<void> attach_iter(bpf_program* prog, const std::string& pin_dir, const std::string& what) {
  return replace_link(prog, pin_dir, what, [&] { return bpf_program__attach_iter(prog, nullptr); });
}

Result<void> run_iter(const std::string& pin_dir, const std::string& what) {
  std::string pin = (std::filesystem::path(pin_dir) / ("link_" + what)).string();
  // reading the pinned link runs the program over this namespace's objects
  Fd fd(::open(pin.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return DP_SYS_ERROR(errno, "opening the {} iterator at {} failed", what, pin);
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof(buf))) != 0;)
    if (n < 0 && errno != EINTR) return DP_SYS_ERROR(errno, "running the {} iterator failed", what);
  return {};
}

Result<void> detach_pinned(const std::string& pin_dir, const std::string& what) {
  std::string pin = (std::filesystem::path(pin_dir) / ("link_" + what)).string();
  if (::unlink(pin.c_str()) != 0 && errno != ENOENT)
    return DP_SYS_ERROR(errno, "removing the {} link at {} failed", what, pin);
  return {};
}

// ---------------------------------------------------------------- bpffs

namespace {

// The inode numbers of the initial namespaces' files under /proc/PID/ns:
// the PID namespace's is fixed since Linux 3.8, the mount namespace's since
// Linux 6.18 (before, it is allocated like any other's, never this value).
constexpr ino_t kInitPidNsIno = 0xEFFFFFFCU;
constexpr ino_t kInitMntNsIno = 0xEFFFFFF8U;

ino_t ns_ino(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? st.st_ino : 0;
}

// Why a bpffs this process mounts would die with it: empty when it would
// not (the host's mount namespace, or no way to tell, as before), else the
// reason. A mount namespace other than the host's is a container's (or
// `ip netns exec`'s, or a systemd unit's PrivateMounts): a bpffs mounted
// there goes, with every pin in it, when its last process exits.
std::string private_mount_namespace() {
  ino_t self = ns_ino("/proc/self/ns/mnt");
  if (self == 0 || self == kInitMntNsIno) return {};
  if (ino_t init = ns_ino("/proc/1/ns/mnt"); init != 0) {
    if (init != self) return "this process's mount namespace is not PID 1's";
    if (ns_ino("/proc/self/ns/pid") == kInitPidNsIno) return {};
    return "PID 1 is this container's own (a PID namespace of its own)";
  }
  // PID 1's namespaces unreadable (no CAP_SYS_PTRACE over it, as in a
  // container with hostPID): what container runtimes and Kubernetes leave.
  // /.dockerenv is not taken as a sign: images of virtual machines made
  // from container images keep it on the host.
  if (::access("/run/.containerenv", F_OK) == 0) return "/run/.containerenv: a podman container";
  if (const char* c = ::getenv("container"); c != nullptr && *c != '\0')
    return fmt::format("container={} in the environment", c);
  if (::getenv("KUBERNETES_SERVICE_HOST") != nullptr) return "a Kubernetes pod";
  return {};
}

}  // namespace

Result<void> ensure_bpffs(const std::string& dir) {
  struct statfs st {};
  // The usual place is mounted if it is not, on the host; another root
  // (--bpffs) must be a bpffs already.
  bool usual = dir.rfind("/sys/fs/bpf/", 0) == 0;
  if (usual && (statfs("/sys/fs/bpf", &st) != 0 || st.f_type != BPF_FS_MAGIC)) {
    // never a bpffs that dies with a container: the datapath must outlive it
    if (auto why = private_mount_namespace(); !why.empty())
      return DP_ERROR(
          "/sys/fs/bpf is not a BPF filesystem, and one mounted here would be private to this "
          "mount namespace ({}): the pins, and with them the datapath, would go when it exits. "
          "Mount the host's: `mount -t bpf bpf /sys/fs/bpf` on the host (systemd does at boot), "
          "and give the container the host's /sys/fs/bpf (Kubernetes: a hostPath volume with "
          "mountPropagation HostToContainer; deploy/kubernetes's mount-bpffs init container "
          "mounts it), or pass --bpffs DIR on a BPF filesystem",
          why);
    ::mkdir("/sys/fs/bpf", 0700);
    if (::mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700") != 0)
      return DP_SYS_ERROR(errno, "/sys/fs/bpf is not a BPF filesystem and mounting one failed");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec == std::errc::read_only_file_system)
    return DP_ERROR(
        "creating pin directory {} failed: Read-only file system (the datapath lives in its pins: "
        "dualpathd needs the BPF filesystem writable; a container needs the host's /sys/fs/bpf "
        "mounted read-write)",
        dir);
  if (ec) return DP_SYS_ERROR(ec.value(), "creating pin directory {} failed", dir);
  if (statfs(dir.c_str(), &st) != 0 || st.f_type != BPF_FS_MAGIC)
    return DP_ERROR("pin directory {} is not on a BPF filesystem", dir);
  return {};
}

Result<void> remove_pin_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return {};
  std::filesystem::remove_all(dir, ec);
  if (ec) return DP_SYS_ERROR(ec.value(), "removing pin directory {} failed", dir);
  // remove the parent "dualpath" directory when no other instance uses it
  auto parent = std::filesystem::path(dir).parent_path();
  if (parent.filename() == "dualpath" && std::filesystem::is_empty(parent, ec))
    std::filesystem::remove(parent, ec);
  return {};
}

bool is_our_prog(uint32_t prog_id) {
  Fd fd(bpf_prog_get_fd_by_id(prog_id));
  if (!fd.valid()) return false;
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0) return false;
  // the kernel keeps the first BPF_OBJ_NAME_LEN - 1 characters of a name
  for (const auto& p : kPrograms)
    if (is_tc(p) && p.name.substr(0, BPF_OBJ_NAME_LEN - 1) == info.name) return true;
  return false;
}

// ---------------------------------------------------------------- tc

namespace {

const char* dir_name(bpf_tc_attach_point p) { return p == BPF_TC_EGRESS ? "egress" : "ingress"; }

// 0 if absent, else the prog id at our handle/priority.
uint32_t query(int ifindex, bpf_tc_attach_point point) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = point);
  LIBBPF_OPTS(bpf_tc_opts, q, .handle = kTcHandle, .priority = kTcPriority);
  if (bpf_tc_query(&hook, &q) != 0) return 0;
  return q.prog_id;
}

// Number of tc filters on the clsact ingress + egress of ifindex, -1 on error.
int count_filters(int ifindex) {
  auto sk = NlSocket::connect(NETLINK_ROUTE);
  if (!sk) return -1;
  int total = 0;
  for (uint32_t minor : {TC_H_MIN_INGRESS, TC_H_MIN_EGRESS}) {
    nl_cache* cache = nullptr;
    if (rtnl_cls_alloc_cache(sk->get(), ifindex, TC_H_MAKE(TC_H_CLSACT, minor), &cache) != 0)
      return -1;
    total += nl_cache_nitems(cache);
    nl_cache_free(cache);
  }
  return total;
}

}  // namespace

Result<void> Tc::attach(int ifindex, const std::string& ifname, bool egress, int prog_fd,
                        const dp_owned_map& owned) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
              .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
  int err = bpf_tc_hook_create(&hook);
  if (err == 0) {
    DP_TRY(owned.update(static_cast<uint32_t>(ifindex), DP_OWN_CLSACT));
  } else if (err != -EEXIST) {
    return DP_SYS_ERROR(err, "creating the clsact qdisc on {} failed", ifname);
  }
  auto point = egress ? BPF_TC_EGRESS : BPF_TC_INGRESS;
  uint32_t existing = query(ifindex, point);
  // Ours: the program we hold (a reload, or a restart that adopted the
  // pins), or one named as ours from an earlier load (an upgrade; looking a
  // program up by id needs CAP_SYS_ADMIN).
  bpf_prog_info mine{};
  uint32_t mine_len = sizeof(mine);
  bool same =
      existing && bpf_obj_get_info_by_fd(prog_fd, &mine, &mine_len) == 0 && mine.id == existing;
  if (existing && !same && !is_our_prog(existing))
    return DP_ERROR(
        "a tc {} filter that is not dualpath's (prog id {}) occupies handle {:#x} priority "
        "{:#x} on {}; refusing to replace it",
        dir_name(point), existing, kTcHandle, kTcPriority, ifname);
  LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = point);
  LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE, .handle = kTcHandle,
              .priority = kTcPriority);
  err = bpf_tc_attach(&h, &o);
  if (err != 0)
    return DP_SYS_ERROR(err, "attaching the tc {} program on {} failed", dir_name(point), ifname);
  return {};
}

Result<void> Tc::detach(int ifindex, const std::string& ifname, const dp_owned_map* owned) {
  for (auto point : {BPF_TC_EGRESS, BPF_TC_INGRESS}) {
    uint32_t existing = query(ifindex, point);
    if (!existing || !is_our_prog(existing)) continue;
    LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = point);
    LIBBPF_OPTS(bpf_tc_opts, o, .handle = kTcHandle, .priority = kTcPriority);
    int err = bpf_tc_detach(&h, &o);
    if (err != 0 && err != -ENOENT && err != -ENODEV)  // ENODEV: the interface is gone
      return DP_SYS_ERROR(err, "detaching the tc {} program from {} failed", dir_name(point),
                          ifname);
  }
  if (!owned) return {};
  uint32_t key = static_cast<uint32_t>(ifindex), val = 0;
  if (!owned->lookup(key, &val) || !(val & DP_OWN_CLSACT)) return {};
  if (count_filters(ifindex) == 0) {
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
                .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
    int err = bpf_tc_hook_destroy(&hook);
    if (err != 0 && err != -ENOENT && err != -EINVAL && err != -ENODEV)
      return DP_SYS_ERROR(err, "removing the clsact qdisc dualpath created on {} failed", ifname);
  }
  // Once we have detached, the qdisc is no longer ours to manage: if others
  // attached filters to it meanwhile, it stays, and it is theirs.
  DP_TRY(owned->remove(key));
  return {};
}

Result<TcStatus> Tc::status(int ifindex, const dp_owned_map* owned) {
  TcStatus s;
  s.egress_prog_id = query(ifindex, BPF_TC_EGRESS);
  s.ingress_prog_id = query(ifindex, BPF_TC_INGRESS);
  s.clsact = count_filters(ifindex) >= 0;
  if (owned) {
    uint32_t key = static_cast<uint32_t>(ifindex), val = 0;
    s.clsact_owned = owned->lookup(key, &val) && (val & DP_OWN_CLSACT);
  }
  return s;
}

}  // namespace dp
