/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The tc hooks, attached with clsact on every rail (bpf/dp_tc.bpf.c):
 *   egress  - classify, place the flow on a rail (lib/place.h), police the
 *             classes without a reserve where one is kept, stamp the
 *             class's QoS, redirect when the decided rail is not the one the
 *             route chose;
 *   ingress - per-rail, per-class receive accounting.
 * Both are fail-open: a packet they cannot handle passes untouched and is
 * counted by reason in dp_exceptions.
 *
 * "Pass" is TC_ACT_UNSPEC, not TC_ACT_OK: the daemon attaches these programs
 * ahead of other filters (priority 1), and TC_ACT_UNSPEC lets the filters
 * after them (Cilium's, an operator's) still see the packet, where TC_ACT_OK
 * would end the chain. */
#ifndef DP_BPF_TC_H
#define DP_BPF_TC_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "listen.h"
#include "maps.h"
#include "place.h"
#include "steer.h"

#define DP_PASS TC_ACT_UNSPEC

static __always_inline void dp_count_tx(__u32 rail, __u8 cls, __u32 len)
{
	struct dp_counters *c = dp_counters_of(rail, cls);

	if (c) {
		c->tx_bytes += len;
		c->tx_packets += 1;
	}
}

/* The packet's departure time when it is one on the monotonic clock (TCP
 * stamps every packet it sends with it), else 0. A receive timestamp (the
 * real-time clock) is never taken for it. */
static __always_inline __u64 dp_mono_tstamp(const struct __sk_buff *skb)
{
	if (skb->tstamp_type != BPF_SKB_TSTAMP_DELIVERY_MONO)
		return 0;
	return skb->tstamp;
}

#define DP_TCP_FIN 0x01
#define DP_TCP_SYN 0x02
#define DP_TCP_RST 0x04
#define DP_TCP_ACK 0x10

/* A TCP segment that only acknowledges: ACK set, no SYN, FIN or RST, and
 * nothing after its header (skb->len counts the whole frame, a GSO one's
 * too, from the Ethernet header as l4_off does). */
static __always_inline int dp_pure_ack(const struct __sk_buff *skb, const struct dp_pkt *pkt)
{
	return pkt->key.proto == IPPROTO_TCP &&
	       (pkt->tcp_flags & (DP_TCP_SYN | DP_TCP_FIN | DP_TCP_RST | DP_TCP_ACK)) ==
		       DP_TCP_ACK &&
	       skb->len <= (__u32)pkt->l4_off + pkt->tcp_hlen;
}

/* Stamps the class's skb->priority and DSCP, or those for its pure ACKs.
 * Called last: after it, packet pointers are invalid (bpf_skb_store_bytes). */
static __always_inline void dp_apply_qos(struct __sk_buff *skb, const struct dp_pkt *pkt, __u8 cls)
{
	__u32 idx = cls;
	struct dp_class_qos *q = bpf_map_lookup_elem(&dp_class_qos, &idx);
	__u32 priority;
	__u8 hdr[2], dscp, flags;

	if (!q || !q->flags)
		return;
	priority = q->priority;
	dscp = q->dscp;
	flags = q->flags;
	if ((flags & (DP_QOS_F_ACK_PRIORITY | DP_QOS_F_ACK_DSCP)) && dp_pure_ack(skb, pkt)) {
		if (flags & DP_QOS_F_ACK_PRIORITY) {
			priority = q->ack_priority;
			flags |= DP_QOS_F_PRIORITY;
		}
		if (flags & DP_QOS_F_ACK_DSCP) {
			dscp = q->ack_dscp;
			flags |= DP_QOS_F_DSCP;
		}
	}
	if (flags & DP_QOS_F_PRIORITY)
		skb->priority = priority;
	if (!(flags & DP_QOS_F_DSCP) || bpf_skb_load_bytes(skb, pkt->l3_off, hdr, 2))
		return;
	if (pkt->family == DP_AF_INET) {
		/* version/IHL and TOS form the header's first 16-bit word */
		__u8 tos = (__u8)((dscp << 2) | (hdr[1] & 3));
		__u16 old_word, new_word;

		if (tos == hdr[1])
			return;
		__builtin_memcpy(&old_word, hdr, 2);
		hdr[1] = tos;
		__builtin_memcpy(&new_word, hdr, 2);
		bpf_l3_csum_replace(skb, pkt->l3_off + DP_IPV4_CSUM_OFF, old_word, new_word, 2);
		bpf_skb_store_bytes(skb, pkt->l3_off + 1, &tos, 1, 0);
	} else {
		/* version(4) | traffic class(8) | flow label(20); DSCP = TC >> 2 */
		__u8 tc = (__u8)((dscp << 2) | (((hdr[1] >> 4) & 0x0f) & 3));
		__u8 b0 = (__u8)((hdr[0] & 0xf0) | (tc >> 4));
		__u8 b1 = (__u8)((hdr[1] & 0x0f) | ((tc & 0x0f) << 4));

		if (b0 == hdr[0] && b1 == hdr[1])
			return;
		hdr[0] = b0;
		hdr[1] = b1;
		bpf_skb_store_bytes(skb, pkt->l3_off, hdr, 2, 0);
	}
}

/* The kernel's types a multipath subflow's socket is read through, by name
 * (CO-RE): where its packets last arrived (set by TCP from every packet that
 * changes it), and whether its MPTCP connection was accepted here. */
struct sock___tc {
	int sk_rx_dst_ifindex;
} __attribute__((preserve_access_index));

struct mptcp_pm_data___dp {
	__u8 server_side;
} __attribute__((preserve_access_index));

struct mptcp_sock {
	struct mptcp_pm_data___dp pm;
} __attribute__((preserve_access_index));

/* Where the packet's own socket puts it, before any decision (DP_RAIL_NONE:
 * the class's decision places it):
 *   - a socket bound to a device stays on the rail the route chose: the
 *     application chose the device, or the daemon did (a multipath class's
 *     subflows, one per rail: daemon/multipath.cpp);
 *   - in the shared topology, a multipath class's MPTCP connection accepted
 *     here answers each subflow on the rail its packets arrive on, while
 *     that rail is up: the connecting side makes a subflow per rail, bound
 *     to it, and sets their roles. A SYN-ACK leaves from a request socket,
 *     which records no arrival: it goes where its SYN came in
 *     (dp_syn_rails). */
static __always_inline __u32 dp_socket_rail(struct __sk_buff *skb, const struct dp_pkt *pkt,
					    __u8 cls, __u32 rail_here)
{
	struct bpf_sock *sk = skb->sk, *full;
	struct dp_class_tcp *ct;
	struct mptcp_sock *msk;
	struct tcp_sock *tp;
	__u32 key = cls, *syn;

	if (!sk)
		return DP_RAIL_NONE;
	full = bpf_sk_fullsock(sk);
	if (full && full->bound_dev_if)
		return rail_here;
	if (pkt->key.proto != IPPROTO_TCP)
		return DP_RAIL_NONE;
	ct = bpf_map_lookup_elem(&dp_class_tcp, &key);
	if (!ct || !(ct->flags & DP_CLASS_TCP_F_MULTIPATH))
		return DP_RAIL_NONE;
	if (!full) {
		if ((pkt->tcp_flags & (DP_TCP_SYN | DP_TCP_ACK)) != (DP_TCP_SYN | DP_TCP_ACK))
			return DP_RAIL_NONE;
		syn = bpf_map_lookup_elem(&dp_syn_rails, &pkt->key);
		key = syn ? *syn : DP_RAIL_NONE;
	} else {
		msk = bpf_skc_to_mptcp_sock(full);
		if (!msk || !msk->pm.server_side)
			return DP_RAIL_NONE;
		tp = bpf_skc_to_tcp_sock(full);
		if (!tp)
			return DP_RAIL_NONE;
		key = dp_rail_of_ifindex((__u32)((struct sock___tc *)tp)->sk_rx_dst_ifindex);
	}
	return dp_rail_usable_for(key, DP_RAIL_F_MP_UP) ? key : DP_RAIL_NONE;
}

/* tc ingress: a TCP SYN's rail, for its SYN-ACK (dp_socket_rail). */
static __always_inline void dp_note_syn(const struct dp_pkt *pkt, __u32 rail_here)
{
	struct dp_flow_key back = {};

	if (pkt->key.proto != IPPROTO_TCP ||
	    (pkt->tcp_flags & (DP_TCP_SYN | DP_TCP_ACK)) != DP_TCP_SYN ||
	    !dp_rail_usable_for(rail_here, DP_RAIL_F_MP_UP))
		return;
	__builtin_memcpy(back.saddr, pkt->key.daddr, sizeof(back.saddr));
	__builtin_memcpy(back.daddr, pkt->key.saddr, sizeof(back.daddr));
	back.sport = pkt->key.dport;
	back.dport = pkt->key.sport;
	back.proto = IPPROTO_TCP;
	bpf_map_update_elem(&dp_syn_rails, &back, &rail_here, BPF_ANY);
}

/* Whether the TCP segment is the first its socket has not had acknowledged:
 * a retransmission after a timeout, or a send with nothing in flight. TCP
 * takes no ACK-clocked second chance at such a segment when it is dropped
 * locally: it waits for a timer (the 200 ms probe, or 500 ms after a
 * retransmission timeout). */
static __always_inline int dp_tcp_head_segment(struct __sk_buff *skb, const struct dp_pkt *pkt)
{
	struct bpf_sock *sk = skb->sk;
	struct bpf_tcp_sock *tp;

	if (pkt->key.proto != IPPROTO_TCP || !sk)
		return 0;
	sk = bpf_sk_fullsock(sk);
	tp = sk ? bpf_tcp_sock(sk) : 0;
	return tp && pkt->tcp_seq == tp->snd_una;
}

/* Reserves (dp_police): 1 when a packet of class `cls` leaving on `rail`
 * fits the rate the rail's policed classes are held to; 0 when it does not
 * (dropped: TCP sees a local drop, keeps the segment, sends less and tries
 * it again at its next ACK); -1 for a TCP socket's head segment that does
 * not (dp_tcp_head_segment), which is taken as if sent and lost. A head has
 * no ACK to wait for: after a local drop TCP would send it again only on
 * its probe timer, at least 200 ms later, while a segment it counts as sent
 * is recovered by its loss probe or its RTO, within milliseconds at a rail's
 * RTT and the class's rto_min. A head first goes on credit of up to one
 * bucket, so that the class still keeps to the rate over time. Tokens are
 * kept in units of 1e-9 byte, so that refills between packets microseconds
 * apart are not lost to rounding; a refill covers at most 100 ms. */
static __always_inline int dp_police_admit(struct __sk_buff *skb, const struct dp_pkt *pkt,
					   __u32 rail, __u8 cls)
{
	__u32 len = skb->len;
	struct dp_police *p = bpf_map_lookup_elem(&dp_police, &rail);
	struct dp_police_drops *d;
	__s64 tokens, burst, cost = (__s64)len * 1000000000ll;
	__u64 now, elapsed;
	int head, ok;

	if (!p || !p->rate || cls >= 32 || !(p->classes & (1u << cls)))
		return 1;
	head = dp_tcp_head_segment(skb, pkt);
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&p->lock);
	elapsed = now > p->last_ns ? now - p->last_ns : 0;
	if (elapsed > 100000000ull)
		elapsed = 100000000ull;
	burst = (__s64)p->burst * 1000000000ll;
	tokens = p->tokens + (__s64)(elapsed * p->rate);
	if (tokens > burst)
		tokens = burst;
	/* a head segment may borrow up to a bucket, repaid before others go:
	 * more would let a sender that keeps little in flight pass its heads
	 * alone at more than the rate */
	ok = tokens >= cost || (head && tokens - cost >= -burst);
	if (ok)
		tokens -= cost;
	else if (head)
		ok = -1;
	p->tokens = tokens;
	p->last_ns = now;
	bpf_spin_unlock(&p->lock);
	if (ok <= 0) {
		d = bpf_map_lookup_elem(&dp_police_drops, &rail);
		if (d) {
			d->packets += 1;
			d->bytes += len;
		}
	}
	return ok;
}

/* tc egress: classify, place the flow on a rail, redirect when the decided
 * rail is not the one the route chose. */
static __always_inline int dp_tc_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 rail_here = dp_rail_of_ifindex(skb->ifindex);
	struct bpf_redir_neigh nh = {};
	struct dp_pkt pkt = {};
	struct dp_config *cfg;
	struct dp_counters *c;
	struct dp_rail *rail;
	__u32 zero = 0, target, mark = skb->mark, mark_mask, redirect_bit;
	__u32 usable = DP_RAIL_F_ENABLED; /* what a redirect target's flags must hold */
	long ret;
	int exc, admit;
	__u8 cls, rule = DP_RULE_NONE;

	if (rail_here == DP_RAIL_NONE) {
		dp_count_exception(DP_MAX_RAILS, DP_EXC_UNKNOWN_IFINDEX);
		return DP_PASS;
	}
	exc = dp_parse(data, data_end, &pkt);
	if (exc >= 0) {
		dp_count_exception(rail_here, exc);
		dp_count_tx(rail_here, DP_CLASS_NONE, skb->len);
		return DP_PASS;
	}
	cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!cfg)
		return DP_PASS;
	dp_mark_cfg(&mark_mask, &redirect_bit);
	cls = dp_classify_rule(&pkt, mark & mark_mask & ~redirect_bit, cfg, &rule, skb,
			       DP_CGROUP_SKB);

	if (pkt.key.proto == IPPROTO_UDP) {
		/* a UDP server's reply to a peer handed over to it (lib/listen.h):
		 * its socket chose the rail, the class's reserve and QoS apply */
		target = dp_udp_egress(skb, &pkt);
		if (target != DP_RAIL_NONE) {
			if (cls < DP_MAX_CLASSES) {
				dp_flow_held(&pkt, cls, rule, cfg->active_gen & 1, target, skb->len);
				if (dp_police_admit(skb, &pkt, target, cls) <= 0)
					return TC_ACT_SHOT;
				dp_apply_qos(skb, &pkt, cls);
			}
			if (target == rail_here) {
				dp_count_tx(rail_here, cls, skb->len);
				return DP_PASS;
			}
			/* a route by source chose another rail: to the one it came on */
			usable = DP_RAIL_F_ENABLED | DP_RAIL_F_CONNECT;
			goto redirect;
		}
	}
	if (mark & redirect_bit) {
		/* steered here by another rail's hook: count it, never re-steer */
		skb->mark = mark & ~redirect_bit;
		dp_count_tx(rail_here, cls, skb->len);
		return DP_PASS;
	}
	if (cls >= DP_MAX_CLASSES) {
		dp_count_tx(rail_here, DP_CLASS_NONE, skb->len);
		return DP_PASS;
	}

	target = dp_socket_rail(skb, &pkt, cls, rail_here);
	if (target != DP_RAIL_NONE)
		dp_flow_held(&pkt, cls, rule, cfg->active_gen & 1, target, skb->len);
	else
		target = dp_flow_rail(&pkt, cls, rule, cfg->active_gen & 1, rail_here, skb->len,
				      cfg->flowlet_gap_ns, dp_mono_tstamp(skb), skb);
	/* over a reserve's policer: dropped, or a head segment taken and lost */
	admit = dp_police_admit(skb, &pkt, target < DP_MAX_RAILS ? target : rail_here, cls);
	if (admit <= 0)
		return admit < 0 ? TC_ACT_STOLEN : TC_ACT_SHOT;
	dp_apply_qos(skb, &pkt, cls);
	if (target == rail_here || target >= DP_MAX_RAILS) {
		dp_count_tx(rail_here, cls, skb->len);
		return DP_PASS;
	}

redirect:
	rail = bpf_map_lookup_elem(&dp_rails, &target);
	if (!rail || !(rail->flags & usable) || !rail->ifindex) {
		dp_count_exception(rail_here, DP_EXC_TARGET_UNAVAILABLE);
		dp_count_tx(rail_here, cls, skb->len);
		return DP_PASS;
	}
	if (pkt.family == DP_AF_INET && (rail->flags & DP_RAIL_F_GW4)) {
		nh.nh_family = DP_AF_INET;
		nh.ipv4_nh = rail->gw4;
	} else if (pkt.family == DP_AF_INET6 && (rail->flags & DP_RAIL_F_GW6)) {
		nh.nh_family = DP_AF_INET6;
		__builtin_memcpy(nh.ipv6_nh, rail->gw6, sizeof(nh.ipv6_nh));
	} else {
		dp_count_exception(rail_here, DP_EXC_NO_GATEWAY);
		dp_count_tx(rail_here, cls, skb->len);
		return DP_PASS;
	}

	skb->mark = mark | redirect_bit;
	ret = bpf_redirect_neigh(rail->ifindex, &nh, sizeof(nh), 0);
	if (ret != TC_ACT_REDIRECT) {
		skb->mark = mark;
		dp_count_exception(rail_here, DP_EXC_REDIRECT_FAILED);
		dp_count_tx(rail_here, cls, skb->len);
		return DP_PASS;
	}
	c = dp_counters_of(rail_here, cls);
	if (c) {
		c->redirect_packets += 1;
		c->redirect_bytes += skb->len;
	}
	return TC_ACT_REDIRECT;
}

/* tc ingress: per-rail, per-class receive accounting; a server bound to
 * another rail's address made reachable (dp_udp_ingress, dp_tcp_ingress). */
static __always_inline int dp_tc_ingress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 rail_here = dp_rail_of_ifindex(skb->ifindex);
	struct dp_pkt pkt = {};
	struct dp_counters *c;
	struct dp_config *cfg;
	__u32 zero = 0;
	__u8 cls = DP_CLASS_NONE;
	int exc;

	if (rail_here == DP_RAIL_NONE)
		return DP_PASS;
	exc = dp_parse(data, data_end, &pkt);
	cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (exc < 0 && cfg) {
		cls = dp_classify(&pkt, 0, cfg);
		dp_note_syn(&pkt, rail_here);
	}
	c = dp_counters_of(rail_here, cls);
	if (c) {
		c->rx_bytes += skb->len;
		c->rx_packets += 1;
	}
	if (exc < 0) {
		dp_udp_ingress(skb, &pkt);
		dp_tcp_ingress(skb, &pkt);
	}
	return DP_PASS;
}

#endif /* DP_BPF_TC_H */
