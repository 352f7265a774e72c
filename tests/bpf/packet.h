// SPDX-License-Identifier: Apache-2.0
// A small packet builder for BPF_PROG_TEST_RUN fixtures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dualpath/abi.h"

namespace dptest {

struct PacketSpec {
  int family = 4;          // 4 or 6
  uint8_t proto = 6;       // IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, ...
  uint16_t sport = 40000;  // host order
  uint16_t dport = 50001;
  uint16_t ethertype = 0;        // 0: from family
  bool vlan = false;             // one 802.1Q tag (VID 42) before the IP header
  bool v4_fragment = false;      // MF set
  bool v6_fragment_hdr = false;  // a fragment extension header before L4
  bool v6_hop_by_hop = false;    // a hop-by-hop header before L4
  uint8_t tos = 0;               // IPv4 TOS / IPv6 traffic class (DSCP << 2 | ECN)
  size_t payload = 64;
  size_t truncate_to = 0;  // 0: full packet
  bool syn = false;        // TCP: SYN (with ack: a SYN-ACK)
  bool ack = true;         // TCP: ACK
  bool fin = false;        // TCP: FIN
  size_t tcp_options = 0;  // TCP: bytes of options (NOPs), a multiple of 4
};

std::vector<uint8_t> build_packet(const PacketSpec& s);

// The ones' complement sum of an IPv4 header (0xffff when its checksum is right).
uint16_t ipv4_header_sum(const uint8_t* hdr, size_t len);

// Flow key of the packet as the datapath builds it (for dp_flows lookups).
dp_flow_key flow_key_of(const PacketSpec& s);

}  // namespace dptest
