// SPDX-License-Identifier: Apache-2.0
#include "packet.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>

#include <cstring>

#include "dualpath/abi.h"

namespace dptest {

namespace {
// (resize and copy, not insert at the end: GCC 12 at -O3 takes the empty
// vector's insert for an overflow, -Wstringop-overflow, a false positive)
void put(std::vector<uint8_t>& v, const void* p, size_t n) {
  if (n == 0) return;  // (an empty source may be null: memcpy must not see it)
  size_t at = v.size();
  v.resize(at + n);
  std::memcpy(v.data() + at, p, n);
}
}  // namespace

uint16_t ipv4_header_sum(const uint8_t* hdr, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += uint32_t{hdr[i]} << 8 | hdr[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

std::vector<uint8_t> build_packet(const PacketSpec& s) {
  std::vector<uint8_t> out;
  ethhdr eth{};
  std::memset(eth.h_dest, 0x02, ETH_ALEN);
  std::memset(eth.h_source, 0x04, ETH_ALEN);
  uint16_t l3 = s.ethertype ? s.ethertype : (s.family == 4 ? ETH_P_IP : ETH_P_IPV6);
  eth.h_proto = htons(s.vlan ? ETH_P_8021Q : l3);
  put(out, &eth, sizeof(eth));
  if (s.vlan) {
    uint16_t tag[2] = {htons(42), htons(l3)};
    put(out, tag, sizeof(tag));
  }

  std::vector<uint8_t> l4;
  if (s.proto == IPPROTO_TCP) {
    tcphdr t{};
    t.source = htons(s.sport);
    t.dest = htons(s.dport);
    t.syn = s.syn ? 1 : 0;
    t.ack = s.ack ? 1 : 0;
    t.fin = s.fin ? 1 : 0;
    put(l4, &t, sizeof(t));
    l4[12] = static_cast<uint8_t>((5 + s.tcp_options / 4) << 4);  // data offset, in words
    l4.resize(l4.size() + s.tcp_options, 1);                      // NOP
  } else if (s.proto == IPPROTO_UDP) {
    udphdr u{};
    u.source = htons(s.sport);
    u.dest = htons(s.dport);
    u.len = htons(static_cast<uint16_t>(sizeof(u) + s.payload));
    put(l4, &u, sizeof(u));
  } else {
    uint8_t icmp[8] = {8, 0, 0, 0, 0, 1, 0, 1};
    put(l4, icmp, sizeof(icmp));
  }
  l4.resize(l4.size() + s.payload, 0xab);

  if (s.family == 4) {
    iphdr ip{};
    ip.version = 4;
    ip.ihl = 5;
    ip.ttl = 64;
    ip.protocol = s.proto;
    ip.tot_len = htons(static_cast<uint16_t>(sizeof(ip) + l4.size()));
    if (s.v4_fragment) ip.frag_off = htons(0x2000);
    ip.saddr = inet_addr("10.99.0.1");
    ip.daddr = inet_addr("10.99.0.2");
    ip.tos = s.tos;
    ip.check = htons(
        static_cast<uint16_t>(~ipv4_header_sum(reinterpret_cast<const uint8_t*>(&ip), sizeof(ip))));
    put(out, &ip, sizeof(ip));
  } else {
    ip6_hdr ip6{};
    ip6.ip6_flow = htonl(6u << 28 | uint32_t{s.tos} << 20 | 0x12345);  // and a flow label
    ip6.ip6_hlim = 64;
    inet_pton(AF_INET6, "fd99::1", &ip6.ip6_src);
    inet_pton(AF_INET6, "fd99::2", &ip6.ip6_dst);
    std::vector<uint8_t> ext;
    uint8_t next = s.proto;
    if (s.v6_fragment_hdr) {
      uint8_t frag[8] = {next, 0, 0, 1, 0, 0, 0, 42};
      ext.insert(ext.begin(), frag, frag + 8);
      next = 44;
    }
    if (s.v6_hop_by_hop) {
      uint8_t hbh[8] = {next, 0, 1, 4, 0, 0, 0, 0};  // PadN option
      ext.insert(ext.begin(), hbh, hbh + 8);
      next = 0;
    }
    ip6.ip6_nxt = next;
    ip6.ip6_plen = htons(static_cast<uint16_t>(ext.size() + l4.size()));
    put(out, &ip6, sizeof(ip6));
    put(out, ext.data(), ext.size());
  }
  put(out, l4.data(), l4.size());
  if (s.truncate_to && s.truncate_to < out.size()) out.resize(s.truncate_to);
  return out;
}

dp_flow_key flow_key_of(const PacketSpec& s) {
  dp_flow_key k{};
  if (s.family == 4) {
    k.saddr[2] = htonl(0xffff);
    k.daddr[2] = htonl(0xffff);
    k.saddr[3] = inet_addr("10.99.0.1");
    k.daddr[3] = inet_addr("10.99.0.2");
  } else {
    inet_pton(AF_INET6, "fd99::1", k.saddr);
    inet_pton(AF_INET6, "fd99::2", k.daddr);
  }
  k.sport = htons(s.sport);
  k.dport = htons(s.dport);
  k.proto = s.proto;
  return k;
}

}  // namespace dptest
