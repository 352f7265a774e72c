// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the datapath's parser and classifier on any frame, through the
// real programs (loaded through the verifier, unpinned) and BPF_PROG_TEST_RUN,
// programmed from the lab policy (policies/lab-a.toml) as the BPF tests do.
// Needs root (CAP_BPF).
//
// Input: byte 0 picks the hook (even: egress, odd: ingress), bytes 1-4 are
// skb->mark, the rest is the frame. The fail-open invariants:
//  - nothing is dropped: the verdict is "pass" or, at egress, "redirect";
//  - ingress never redirects and never changes a byte;
//  - a redirect is only for a frame that an independent parser (below) reads
//    as unfragmented IPv4/IPv6 TCP/UDP with its whole L4 header, whose mark
//    does not say "already redirected" or name a path, and whose mark or
//    ports belong to a class the decisions put on the other rail;
//  - a frame that parser cannot classify leaves unchanged.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/pkt_cls.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "dualpath/core/encode.h"
#include "dualpath/core/policy.h"
#include "dualpath/kernel/bpf_skeleton.h"

namespace {

constexpr int kPass = TC_ACT_UNSPEC;
constexpr uint32_t kLo = 1, kRail1 = 4242;

struct World {
  std::unique_ptr<dp::DpSkeleton> skel;
  dp::Policy policy;
  dp::EncodedPolicy enc;
  std::vector<int> rail_of_class;  // by class slot
};

World* setup() {
  auto* w = new World;
  auto skel = dp::DpSkeleton::load("");
  if (!skel) {
    std::fprintf(stderr, "fuzz_datapath: %s (needs root)\n", skel.error().str().c_str());
    std::abort();
  }
  w->skel = std::move(*skel);
  auto load = dp::load_policy_file(std::string(DP_POLICY_DIR) + "/lab-a.toml");
  if (!load.ok()) std::abort();
  w->policy = *load.policy;
  std::vector<int> cslots;
  for (size_t i = 0; i < w->policy.classes.size(); ++i) cslots.push_back(static_cast<int>(i));
  w->enc = dp::encode_policy(w->policy, cslots, {0, 1});
  auto& s = *w->skel;
  for (uint32_t p = 0; p < DP_PORT_SPACE; ++p)
    if (!s.dp_ports().update(p, w->enc.ports[p])) std::abort();
  for (auto& [mark, cls] : w->enc.marks) {
    dp_mark_key k{0, mark};
    dp_mark_val v{cls, {}};
    if (!s.dp_marks().update(k, v)) std::abort();
  }
  uint32_t zero = 0, none = 0;
  dp_config c{0, DP_CLASS_NONE, 0, 0};
  if (!s.dp_config().update(zero, c) || !s.dp_cgroup_gens().update(zero, none)) std::abort();
  for (uint32_t slot : {0u, 1u}) {
    dp_rail r = dp::encode_rail(w->policy.paths[slot], slot == 0 ? kLo : kRail1, true);
    if (!s.dp_rails().update(slot, r)) std::abort();
  }
  if (!s.set_rail_ifindex(kLo, 0)) std::abort();
  uint32_t version = 0;
  for (uint32_t cls = 0; cls < w->policy.classes.size(); ++cls) {
    int rail = static_cast<int>(w->policy.path_index(w->policy.classes[cls].prefer));
    w->rail_of_class.push_back(rail);
    dp_decision d = dp::decision_all_on(rail, false, ++version);
    if (!s.dp_decisions().update(cls, d)) std::abort();
  }
  return w;
}

struct Parsed {
  uint8_t proto;
  uint16_t sport, dport;
};

// Independent of bpf/lib/parse.h: what may be classified at all.
std::optional<Parsed> reference_parse(const uint8_t* p, size_t n) {
  auto u16 = [&](size_t off) { return static_cast<uint16_t>(p[off] << 8 | p[off + 1]); };
  if (n < 14) return std::nullopt;
  size_t off = 12;
  uint16_t type = u16(off);
  off = 14;
  if (type == 0x8100 || type == 0x88a8) {
    if (n < 18) return std::nullopt;
    type = u16(16);
    off = 18;
  }
  uint8_t proto;
  if (type == 0x0800) {
    if (n < off + 20) return std::nullopt;
    size_t ihl = static_cast<size_t>(p[off] & 0xf) * 4;
    if (ihl < 20 || n < off + ihl) return std::nullopt;
    if (u16(off + 6) & 0x3fff) return std::nullopt;  // MF or an offset: a fragment
    proto = p[off + 9];
    off += ihl;
  } else if (type == 0x86dd) {
    if (n < off + 40) return std::nullopt;
    proto = p[off + 6];
    off += 40;
    for (int i = 0; i < 8 && (proto == 0 || proto == 43 || proto == 60); ++i) {
      if (n < off + 2) return std::nullopt;
      uint8_t next = p[off];
      off += (static_cast<size_t>(p[off + 1]) + 1) * 8;
      proto = next;
    }
    if (proto == 44) return std::nullopt;
  } else {
    return std::nullopt;
  }
  if (proto != IPPROTO_TCP && proto != IPPROTO_UDP) return std::nullopt;
  if (n < off + (proto == IPPROTO_TCP ? 20u : 8u)) return std::nullopt;
  return Parsed{proto, u16(off), u16(off + 2)};
}

// The classes this frame could be in: its mark's, its destination port's,
// its source port's. (The programs pick one; a redirect must be for one of
// these.)
std::vector<int> candidate_classes(const World& w, const Parsed& pk, uint32_t mark) {
  std::vector<int> out;
  uint32_t m = mark & w.policy.routing.mark_mask;
  for (auto& [mk, cls] : w.enc.marks)
    if (mk == m && cls != DP_CLASS_NONE) out.push_back(cls);
  bool tcp = pk.proto == IPPROTO_TCP;
  uint8_t d = w.enc.ports[pk.dport].cls[tcp ? DP_PORT_TCP_DST : DP_PORT_UDP_DST];
  uint8_t s = w.enc.ports[pk.sport].cls[tcp ? DP_PORT_TCP_SRC : DP_PORT_UDP_SRC];
  if (d != DP_CLASS_NONE) out.push_back(d);
  if (s != DP_CLASS_NONE) out.push_back(s);
  return out;
}

bool names_a_path(const World& w, uint32_t mark) {
  for (auto& [mk, cls] : w.enc.marks)
    if (cls == DP_CLASS_NONE && mk == (mark & w.policy.routing.mark_mask)) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* w = setup();
  if (size < 5) return 0;
  bool ingress = data[0] & 1;
  uint32_t mark;
  std::memcpy(&mark, data + 1, 4);
  std::vector<uint8_t> frame(data + 5, data + size), out(frame.size() + 256);
  if (frame.size() < 14 || frame.size() > 9000) return 0;
  __sk_buff ctx_in{}, ctx_out{};
  ctx_in.mark = mark;
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = out.data(),
              .data_size_in = static_cast<uint32_t>(frame.size()),
              .data_size_out = static_cast<uint32_t>(out.size()), .ctx_in = &ctx_in,
              .ctx_out = &ctx_out, .ctx_size_in = sizeof(ctx_in), .ctx_size_out = sizeof(ctx_out),
              .repeat = 1);
  int fd = ingress ? w->skel->ingress_fd() : w->skel->egress_fd();
  if (bpf_prog_test_run_opts(fd, &opts) != 0) return 0;  // the kernel refused the frame itself
  int ret = static_cast<int>(opts.retval);
  out.resize(opts.data_size_out);
  bool unchanged = out == frame;
  if (ret != kPass && ret != TC_ACT_REDIRECT) {
    std::fprintf(stderr, "verdict %d: the datapath dropped or diverted a frame\n", ret);
    __builtin_trap();
  }
  if (ingress && (ret != kPass || !unchanged)) {
    std::fprintf(stderr, "ingress changed or redirected a frame\n");
    __builtin_trap();
  }
  auto pk = reference_parse(frame.data(), frame.size());
  if (ret == TC_ACT_REDIRECT) {
    bool may = pk && !(mark & w->policy.routing.redirect_mark) && !names_a_path(*w, mark);
    bool elsewhere = false;
    if (may)
      for (int cls : candidate_classes(*w, *pk, mark))
        elsewhere = elsewhere || w->rail_of_class.at(static_cast<size_t>(cls)) != 0;
    if (!may || !elsewhere) {
      std::fprintf(stderr, "redirected a frame that no class on the other rail claims\n");
      __builtin_trap();
    }
  }
  if (!pk && !unchanged) {
    std::fprintf(stderr, "changed a frame it cannot classify\n");
    __builtin_trap();
  }
  return 0;
}
