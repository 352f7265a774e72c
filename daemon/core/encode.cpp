// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/encode.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace dp {

Result<std::vector<int>> assign_slots(const std::vector<std::string>& existing,
                                      const std::vector<std::string>& wanted, size_t capacity,
                                      const std::vector<int>& reserved) {
  std::vector<int> out(wanted.size(), -1);
  std::vector<bool> used(capacity, false);
  for (int r : reserved)
    if (r >= 0 && static_cast<size_t>(r) < capacity) used[r] = true;
  for (size_t i = 0; i < wanted.size(); ++i) {
    for (size_t s = 0; s < existing.size() && s < capacity; ++s) {
      if (!existing[s].empty() && existing[s] == wanted[i] && !used[s]) {
        out[i] = static_cast<int>(s);
        used[s] = true;
        break;
      }
    }
  }
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (out[i] >= 0) continue;
    // prefer slots never named before, so a removed name's counters are not reused at once
    for (int pass = 0; pass < 2 && out[i] < 0; ++pass) {
      for (size_t s = 0; s < capacity; ++s) {
        bool named = s < existing.size() && !existing[s].empty();
        if (used[s] || (pass == 0 && named)) continue;
        out[i] = static_cast<int>(s);
        used[s] = true;
        break;
      }
    }
    if (out[i] < 0)
      return DP_ERROR("no free slot for \"{}\": at most {} are supported", wanted[i], capacity);
  }
  return out;
}

EncodedPolicy encode_policy(const Policy& p, const std::vector<int>& class_slot,
                            const std::vector<int>& rail_slot) {
  EncodedPolicy e;
  e.class_slot = class_slot;
  e.rail_slot = rail_slot;
  dp_port_entry none{};
  std::fill(std::begin(none.cls), std::end(none.cls), DP_CLASS_NONE);
  e.ports.assign(DP_PORT_SPACE, none);
  for (size_t i = 0; i < p.classes.size(); ++i) {
    const auto& c = p.classes[i];
    auto slot = static_cast<uint8_t>(class_slot[i]);
    for (const auto& r : c.ports) {
      int dst = r.proto == Proto::Tcp ? DP_PORT_TCP_DST : DP_PORT_UDP_DST;
      int src = r.proto == Proto::Tcp ? DP_PORT_TCP_SRC : DP_PORT_UDP_SRC;
      for (uint32_t port = r.lo; port <= r.hi; ++port) {
        if (c.match != PortMatch::Src) e.ports[port].cls[dst] = slot;
        if (c.match != PortMatch::Dst) e.ports[port].cls[src] = slot;
      }
    }
    if (c.mark) e.marks.emplace_back(*c.mark, slot);
  }
  // A socket marked with a path's fwmark asked for that path (the policy's
  // own fwmark rule routes it there): the classifier leaves it alone.
  for (const auto& ps : p.paths) e.marks.emplace_back(ps.fwmark, DP_CLASS_NONE);
  if (p.default_class) {
    for (size_t i = 0; i < p.classes.size(); ++i)
      if (p.classes[i].name == *p.default_class)
        e.default_class = static_cast<uint32_t>(class_slot[i]);
  }
  return e;
}

dp_decision decision_all_on(int rail_slot, bool pinned, uint32_t version) {
  dp_decision d{};
  if (rail_slot >= 0 && rail_slot < DP_MAX_RAILS) d.share[rail_slot] = DP_SHARE_SCALE;
  d.flags = pinned ? DP_DECISION_F_PINNED : 0;
  d.version = version;
  return d;
}

std::optional<int> decision_single_rail(const dp_decision& d) {
  for (int r = 0; r < DP_MAX_RAILS; ++r)
    if (d.share[r] == DP_SHARE_SCALE) return r;
  return std::nullopt;
}

dp_rail encode_rail(const PathSpec& p, uint32_t ifindex, bool enabled, Topology t, bool multipath) {
  dp_rail r{};
  r.ifindex = ifindex;
  if (enabled && ifindex && t == Topology::Separate) r.flags = DP_RAIL_F_CONNECT;
  if (enabled && ifindex && t == Topology::Shared)
    r.flags = DP_RAIL_F_ENABLED | (multipath ? uint32_t{DP_RAIL_F_MP_UP} : 0u);
  if (p.gateway) {
    r.flags |= DP_RAIL_F_GW4;
    std::memcpy(&r.gw4, p.gateway->bytes.data(), 4);
  }
  if (p.gateway6) {
    r.flags |= DP_RAIL_F_GW6;
    std::memcpy(r.gw6, p.gateway6->bytes.data(), 16);
  }
  // bpf_setsockopt takes the rate as an int: a rail above 34 Gbit/s is not capped
  const uint64_t pace = p.capacity_bps / 8;
  if (pace > 0 && pace < UINT32_MAX) r.subflow_pace = static_cast<uint32_t>(pace);
  return r;
}

namespace {
// A prefix as network and mask, in network byte order, into 1 or 4 words.
void encode_prefix(const Prefix& pf, uint32_t* net, uint32_t* mask, size_t words) {
  std::array<uint8_t, 16> m{};
  for (int b = 0; b < pf.len; ++b) m[size_t(b / 8)] |= uint8_t(0x80 >> (b % 8));
  std::array<uint8_t, 16> n{};
  for (size_t i = 0; i < 16; ++i) n[i] = pf.addr.bytes[i] & m[i];
  std::memcpy(net, n.data(), words * 4);
  std::memcpy(mask, m.data(), words * 4);
}
}  // namespace

dp_rail_net encode_rail_net(const PathSpec& p, Topology t) {
  dp_rail_net n{};
  if (t != Topology::Separate) return n;
  if (auto v4 = p.network()) encode_prefix(*v4, &n.net4, &n.mask4, 1);
  if (auto v6 = p.network6()) encode_prefix(*v6, n.net6, n.mask6, 4);
  return n;
}

std::vector<std::pair<dp_peer_key, dp_peer>> encode_peers(const Policy& p,
                                                          const std::vector<int>& rail_slot) {
  std::vector<std::pair<dp_peer_key, dp_peer>> out;
  if (p.topology != Topology::Separate) return out;
  for (const auto& pe : p.peers) {
    for (int fam : {AF_INET, AF_INET6}) {
      const auto& list = fam == AF_INET ? pe.addr4 : pe.addr6;
      size_t n = fam == AF_INET ? 4 : 16;
      dp_peer v{};
      for (size_t i = 0; i < list.size() && i < rail_slot.size(); ++i) {
        if (!list[i] || rail_slot[i] < 0 || rail_slot[i] >= DP_MAX_RAILS) continue;
        auto slot = static_cast<size_t>(rail_slot[i]);
        std::memcpy(v.addr[slot], list[i]->bytes.data(), n);
        v.has[slot] = 1;
      }
      for (size_t i = 0; i < list.size() && i < rail_slot.size(); ++i) {
        if (!list[i] || rail_slot[i] < 0 || rail_slot[i] >= DP_MAX_RAILS) continue;
        dp_peer_key k{};
        k.family = static_cast<__u16>(fam);
        std::memcpy(k.addr, list[i]->bytes.data(), n);
        dp_peer e = v;
        e.rail = static_cast<__u8>(rail_slot[i]);
        out.push_back({k, e});
      }
    }
  }
  return out;
}

dp_local_addr encode_local_addr(const PathSpec& p, Topology t) {
  dp_local_addr a{};
  if (t != Topology::Separate) return a;
  if (p.source && p.source->family == AF_INET) std::memcpy(&a.addr4, p.source->bytes.data(), 4);
  if (p.source6 && p.source6->family == AF_INET6) std::memcpy(a.addr6, p.source6->bytes.data(), 16);
  return a;
}

dp_slot_name encode_name(const std::string& name) {
  dp_slot_name n{};
  std::strncpy(n.name, name.c_str(), DP_NAME_LEN - 1);
  return n;
}

std::string decode_name(const dp_slot_name& n) {
  return std::string(n.name, strnlen(n.name, DP_NAME_LEN));
}

// Names of enum dp_exception, for counters and metrics.
const char* exception_name(int reason) {
  static constexpr const char* names[DP_EXC_MAX] = {
      "non_ip",          "short",           "fragment",           "other_l4",
      "ipv6_exthdr",     "unknown_ifindex", "target_unavailable", "no_gateway",
      "redirect_failed", "flow_table_full"};
  return reason >= 0 && reason < DP_EXC_MAX ? names[reason] : "?";
}

dp_class_qos encode_qos(const ClassSpec& c, const QosSettings& node) {
  dp_class_qos q{};
  if (c.skb_priority) {
    q.priority = *c.skb_priority;
    q.flags |= DP_QOS_F_PRIORITY;
  }
  if (c.dscp) {
    q.dscp = *c.dscp;
    q.flags |= DP_QOS_F_DSCP;
  }
  if (node.ack_skb_priority) {
    q.ack_priority = *node.ack_skb_priority;
    q.flags |= DP_QOS_F_ACK_PRIORITY;
  }
  if (node.ack_dscp) {
    q.ack_dscp = *node.ack_dscp;
    q.flags |= DP_QOS_F_ACK_DSCP;
  }
  return q;
}

uint32_t retries_timeout_ms(int retries2) {
  // tcp_model_timeout() with the kernel's constants: exponential backoff from
  // TCP_RTO_MIN (200 ms) to TCP_RTO_MAX (120 s), then linear
  constexpr uint64_t base = 200, max = 120000;
  constexpr int thresh = 9;  // ilog2(max / base)
  auto b = static_cast<uint64_t>(std::clamp(retries2, 0, 255));
  uint64_t ms =
      b <= thresh ? ((2ull << b) - 1) * base : ((2ull << thresh) - 1) * base + (b - thresh) * max;
  return static_cast<uint32_t>(std::min<uint64_t>(ms, UINT32_MAX));
}

dp_class_tcp encode_class_tcp(const ClassSpec& c, int tcp_retries2) {
  dp_class_tcp t{};
  t.rto_min_us = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(c.rto_min).count());
  t.rto_max_ms = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(c.rto_max).count());
  if (t.rto_max_ms) t.user_timeout_ms = retries_timeout_ms(tcp_retries2);
  if (c.multipath) t.flags |= DP_CLASS_TCP_F_MULTIPATH;
  return t;
}

dp_counters sum_counters(const std::vector<dp_counters>& per_cpu) {
  dp_counters s{};
  for (auto& c : per_cpu) {
    s.tx_bytes += c.tx_bytes;
    s.tx_packets += c.tx_packets;
    s.rx_bytes += c.rx_bytes;
    s.rx_packets += c.rx_packets;
    s.redirect_packets += c.redirect_packets;
    s.redirect_bytes += c.redirect_bytes;
    s.flows_placed += c.flows_placed;
    s.flows_replaced += c.flows_replaced;
    s.flowlets += c.flowlets;
  }
  return s;
}

TcpCounters sum_tcp(const std::vector<dp_tcp_stats>& per_cpu) {
  TcpCounters t;
  for (auto& c : per_cpu) {
    TcpCounters one;
    std::copy_n(c.rtt_hist, std::min<size_t>(DP_RTT_BUCKETS, kHistBuckets), one.rtt_us.begin());
    one.rtt_samples = c.rtt_samples;
    one.srtt_us_sum = c.srtt_us_sum;
    one.segs_out = c.segs_out;
    one.retrans_segs = c.retrans_segs;
    one.rto_events = c.rto_events;
    add_tcp(t, one);
  }
  return t;
}

void add_tcp(TcpCounters& into, const TcpCounters& c) {
  for (size_t b = 0; b < kHistBuckets; ++b) into.rtt_us[b] += c.rtt_us[b];
  into.rtt_samples += c.rtt_samples;
  into.srtt_us_sum += c.srtt_us_sum;
  into.segs_out += c.segs_out;
  into.retrans_segs += c.retrans_segs;
  into.rto_events += c.rto_events;
}

}  // namespace dp
