/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Hook-neutral packet parsing: takes [data, data_end) and fills a dp_pkt.
 * Used by the tc programs; an XDP entry can call it unchanged. */
#ifndef DP_BPF_PARSE_H
#define DP_BPF_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "dualpath/abi.h"

/* Address families as the kernel numbers them (AF_INET, AF_INET6): the
 * UAPI headers a BPF program includes do not define them. */
#define DP_AF_INET 2
#define DP_AF_INET6 10

#define DP_VLAN_HLEN 4
#define DP_ETH_P_8021Q 0x8100
#define DP_ETH_P_8021AD 0x88A8
#define DP_IP_MF 0x2000
#define DP_IPV4_CSUM_OFF 10 /* offsetof(struct iphdr, check) */
#define DP_IP_OFFSET 0x1FFF
#define DP_NEXTHDR_HOP 0
#define DP_NEXTHDR_ROUTING 43
#define DP_NEXTHDR_FRAGMENT 44
#define DP_NEXTHDR_DEST 60
#define DP_IPV6_MAX_EXTHDRS 3

struct dp_pkt {
	struct dp_flow_key key;
	__u16 family;	/* AF_INET or AF_INET6 */
	__u16 l3_off;	/* offset of the IP header from the start of the frame */
	__u16 l4_off;	/* offset of the TCP or UDP header */
	__u8 tcp_flags; /* TCP: the header's flags byte (FIN 0x01, SYN 0x02, ACK 0x10) */
	__u8 tcp_hlen;	/* TCP: the header's length with its options, in bytes */
	__u32 tcp_seq;	/* TCP: the sequence number, host order */
};

/* Returns -1 on success, or the dp_exception reason the packet is passed for. */
static __always_inline int dp_parse(void *data, void *data_end, struct dp_pkt *pkt)
{
	struct ethhdr *eth = data;
	void *cursor = data + sizeof(*eth);
	__u16 h_proto;
	__u8 l4proto;

	if (cursor > data_end)
		return DP_EXC_SHORT;
	h_proto = eth->h_proto;
	if (h_proto == bpf_htons(DP_ETH_P_8021Q) || h_proto == bpf_htons(DP_ETH_P_8021AD)) {
		__be16 *inner = cursor + 2;
		if ((void *)(inner + 1) > data_end)
			return DP_EXC_SHORT;
		h_proto = *inner;
		cursor += DP_VLAN_HLEN;
	}

	pkt->l3_off = (__u16)(cursor - data);
	if (h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cursor;
		__u32 ihl;

		if ((void *)(ip + 1) > data_end)
			return DP_EXC_SHORT;
		ihl = ip->ihl * 4u;
		if (ip->version != 4 || ihl < sizeof(*ip))
			return DP_EXC_SHORT;
		if (ip->frag_off & bpf_htons(DP_IP_MF | DP_IP_OFFSET))
			return DP_EXC_FRAGMENT;
		pkt->family = DP_AF_INET;
		pkt->key.saddr[2] = bpf_htonl(0xffff);
		pkt->key.saddr[3] = ip->saddr;
		pkt->key.daddr[2] = bpf_htonl(0xffff);
		pkt->key.daddr[3] = ip->daddr;
		l4proto = ip->protocol;
		cursor += ihl;
	} else if (h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cursor;

		if ((void *)(ip6 + 1) > data_end)
			return DP_EXC_SHORT;
		pkt->family = DP_AF_INET6;
		__builtin_memcpy(pkt->key.saddr, &ip6->saddr, 16);
		__builtin_memcpy(pkt->key.daddr, &ip6->daddr, 16);
		l4proto = ip6->nexthdr;
		cursor += sizeof(*ip6);
#pragma unroll
		for (int i = 0; i < DP_IPV6_MAX_EXTHDRS; i++) {
			struct {
				__u8 nexthdr;
				__u8 hdrlen;
			} *ext = cursor;

			if (l4proto == DP_NEXTHDR_FRAGMENT)
				return DP_EXC_FRAGMENT;
			if (l4proto != DP_NEXTHDR_HOP && l4proto != DP_NEXTHDR_ROUTING &&
			    l4proto != DP_NEXTHDR_DEST)
				break;
			if ((void *)(ext + 1) > data_end)
				return DP_EXC_SHORT;
			l4proto = ext->nexthdr;
			cursor += (ext->hdrlen + 1) * 8;
		}
		if (l4proto == DP_NEXTHDR_FRAGMENT)
			return DP_EXC_FRAGMENT;
		if (l4proto == DP_NEXTHDR_HOP || l4proto == DP_NEXTHDR_ROUTING ||
		    l4proto == DP_NEXTHDR_DEST)
			return DP_EXC_IPV6_EXTHDR;
	} else {
		return DP_EXC_NON_IP;
	}

	if (l4proto != IPPROTO_TCP && l4proto != IPPROTO_UDP)
		return DP_EXC_OTHER_L4;
	{
		/* source and destination port are the first 4 bytes of TCP and UDP */
		__be16 *ports = cursor;

		pkt->l4_off = (__u16)(cursor - data);
		if ((void *)(ports + 2) > data_end)
			return DP_EXC_SHORT;
		if (l4proto == IPPROTO_TCP && cursor + sizeof(struct tcphdr) > data_end)
			return DP_EXC_SHORT;
		if (l4proto == IPPROTO_UDP && cursor + sizeof(struct udphdr) > data_end)
			return DP_EXC_SHORT;
		pkt->key.sport = ports[0];
		pkt->key.dport = ports[1];
		if (l4proto == IPPROTO_TCP) {
			__u8 *th = cursor;

			if ((void *)(th + 14) > data_end)
				return DP_EXC_SHORT;
			pkt->tcp_flags = th[13];
			pkt->tcp_hlen = (__u8)((th[12] >> 4) * 4);
			pkt->tcp_seq = bpf_ntohl(((struct tcphdr *)th)->seq);
		}
	}
	pkt->key.proto = l4proto;
	return -1;
}

#endif /* DP_BPF_PARSE_H */
