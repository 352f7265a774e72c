// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * dualpath tc programs, attached with clsact on every rail:
 *   dp_egress  - classify, place the flow on a rail, redirect when the
 *                decided rail is not the one the route chose;
 *   dp_ingress - per-rail, per-class receive accounting.
 * Both are fail-open: a packet they cannot handle passes untouched and is
 * counted by reason in dp_exceptions.
 *
 * "Pass" is TC_ACT_UNSPEC, not TC_ACT_OK: the daemon attaches these programs
 * ahead of other filters (priority 1), and TC_ACT_UNSPEC lets the filters
 * after them (Cilium's, an operator's) still see the packet, where TC_ACT_OK
 * would end the chain.
 */
#define DP_PASS TC_ACT_UNSPEC
#define DP_SOL_TCP 6 /* SOL_TCP (IPPROTO_TCP) */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "lib/connect.h"
#include "lib/listen.h"
#include "lib/mptcp.h"
#include "lib/steer.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline void dp_count_tx(__u32 rail, __u8 cls, __u32 len)
{
	struct dp_counters *c = dp_counters_of(rail, cls);

	if (c) {
		c->tx_bytes += len;
		c->tx_packets += 1;
	}
}

/* The fields of the kernel's struct tcp_sock that burst placement reads,
 * relocated by name against the running kernel's BTF (CO-RE). */
struct tcp_sock {
	__u32 srtt_us; /* smoothed RTT << 3 */
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 write_seq;
} __attribute__((preserve_access_index));

/* What the packet's TCP socket says at the start of a burst: `unsent`, the
 * bytes the application wrote and TCP has not sent yet, this packet's
 * included (how large the burst is, as far as the send buffer holds it), and
 * `in_flight`, the bytes sent before this packet and not yet acknowledged,
 * and `srtt_ns`, the connection's smoothed RTT (what its bytes take to
 * arrive, queueing included). Returns 0 without a TCP socket (a forwarded
 * packet, UDP, BPF_PROG_TEST_RUN). At tc egress TCP has not yet counted the
 * packet in snd_nxt. */
static __always_inline int dp_tcp_state(struct __sk_buff *skb, __u64 *unsent, __u64 *in_flight,
					__u64 *srtt_ns)
{
	struct bpf_sock *sk;
	struct tcp_sock *tp;

	if (!skb)
		return 0;
	sk = skb->sk;
	if (!sk)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	*unsent = (__u32)(tp->write_seq - tp->snd_nxt);
	*in_flight = (__u32)(tp->snd_nxt - tp->snd_una);
	*srtt_ns = (__u64)(tp->srtt_us >> 3) * 1000;
	return 1;
}

/* An existing flow changes rail: record it and count it on the new rail. */
static __always_inline void dp_flow_move(struct dp_flow *f, __u32 to, __u8 cls)
{
	struct dp_counters *c = dp_counters_of(to, cls);

	f->rail = to;
	f->replacements += 1;
	if (c)
		c->flows_replaced += 1;
}

/* A flowlet, cell or burst begins: the flow moves to `placed` (unless that is
 * DP_RAIL_NONE or where it is) and the flowlet is counted on the rail it goes
 * out on, which is returned. */
static __always_inline __u32 dp_flowlet_begins(struct dp_flow *f, __u32 placed, __u32 target,
					       __u8 cls)
{
	struct dp_counters *c;

	if (placed != DP_RAIL_NONE && placed != target) {
		dp_flow_move(f, placed, cls);
		target = placed;
	}
	c = dp_counters_of(target, cls);
	if (c)
		c->flowlets += 1;
	return target;
}

/* Returns the rail the flow goes out on, updating the flow table.
 *
 * A class whose decision gives every rail less than its whole share is split.
 * A split class is placed by cells when the daemon says so (dp_cells): each
 * cell of a flow, and each new flow, goes where it would finish first
 * (dp_place_ecf), but a cell changes rail only if it cannot overtake the
 * flow's own bytes on the rail it leaves (unless DP_CELL_F_ANY_ORDER). A
 * class placed by bursts (DP_CELL_F_BURSTS) has its bursts measured whether
 * split or not, and, while split, a flow's next burst goes where the daemon
 * planned it (dp_plans); a flow without a plan stays. Otherwise a new flow and
 * a new flowlet (after an idle gap) are placed by the shares, by hash. A flow
 * whose rail lost its share moves at once either way. */
static __always_inline __u32 dp_flow_rail(const struct dp_pkt *pkt, __u8 cls, __u8 rule, __u32 gen,
					  __u32 rail_here, __u32 len, __u64 flowlet_gap_ns,
					  __u64 mono_tstamp, struct __sk_buff *skb)
{
	__u32 idx = cls, zero = 0;
	struct dp_decision *d = bpf_map_lookup_elem(&dp_decisions, &idx);
	const struct dp_cell_cfg *cc = 0;
	struct dp_vq *vq = 0;
	struct dp_counters *c;
	struct dp_flow *f;
	__u32 target;
	int split, bursts;

	if (!d)
		return rail_here;
	split = dp_decision_split(d);
	if (split) {
		cc = dp_cells_of(cls);
		if (cc)
			vq = bpf_map_lookup_elem(&dp_vq, &zero);
		if (!vq)
			cc = 0;
	}
	/* bursts are measured split or not, so that the daemon knows them
	 * before it splits the class */
	bursts = flowlet_gap_ns && dp_bursts_of(cls);
	/* the time is needed only for a split class (flowlets, cells) and for
	 * bursts: a TCP packet carries it (its departure time, set by TCP on the
	 * monotonic clock); others read the clock */
	int timed = (split && (flowlet_gap_ns || cc)) || bursts;
	__u64 now = timed ? (mono_tstamp ? mono_tstamp : bpf_ktime_get_ns()) : 0;

	f = bpf_map_lookup_elem(&dp_flows, &pkt->key);
	if (!f) {
		struct dp_flow nf = {};

		if (cc && vq)
			target = dp_place_ecf(d, cc, vq, now);
		else
			target = dp_place(d, dp_flow_hash(&pkt->key, 0));
		if (target == DP_RAIL_NONE)
			target = rail_here;
		if (!now)
			now = bpf_ktime_get_ns();
		if (cc && vq) {
			dp_vq_add(vq, cc, target, len, now);
			nf.tail_ns = vq->finish_ns[target & (DP_MAX_RAILS - 1)];
		}
		nf.first_seen_ns = now;
		nf.last_seen_ns = now;
		nf.bytes = len;
		nf.packets = 1;
		nf.gen = gen;
		nf.cls = cls;
		nf.rule = rule;
		nf.rail = target;
		nf.flowlet = 1;
		nf.burst_bytes = bursts ? len : 0;
		if (bpf_map_update_elem(&dp_flows, &pkt->key, &nf, BPF_NOEXIST) == 0) {
			c = dp_counters_of(target, cls);
			if (c)
				c->flows_placed += 1;
		} else {
			dp_count_exception(rail_here, DP_EXC_FLOW_TABLE_FULL);
		}
		return target;
	}

	/* flow entries are shared by all CPUs; their statistics are approximate */
	f->cls = cls;
	f->rule = rule;
	f->gen = gen;
	target = f->rail;

	if (target >= DP_MAX_RAILS || !d->share[target & (DP_MAX_RAILS - 1)] ||
	    !dp_rail_usable(target)) {
		/* the rail lost its share (operator move, failover): re-place */
		__u32 flowlet = f->flowlet + 1;
		__u32 moved = cc && vq ? dp_place_ecf(d, cc, vq, now)
				       : dp_place(d, dp_flow_hash(&pkt->key, flowlet));

		if (moved == DP_RAIL_NONE)
			moved = rail_here;
		if (moved != target) {
			f->flowlet = flowlet;
			dp_flow_move(f, moved, cls);
		}
		target = moved;
	} else if (timed && !(f->flags & DP_FLOW_F_COARSE_TIME)) {
		__u64 idle_ns = now - f->last_seen_ns;
		int idle = flowlet_gap_ns && idle_ns > flowlet_gap_ns;
		int new_cell = 0;

		if (cc) {
			__u32 sh = cc->cell_shift & 63;

			new_cell = (f->bytes >> sh) != ((f->bytes + len) >> sh);
		}
		if (bursts && idle) {
			/* a new burst: where the daemon planned it, if split */
			__u32 planned = split ? dp_planned_rail(&pkt->key, d) : DP_RAIL_NONE;

			f->last_burst = f->burst_bytes;
			f->burst_bytes = 0;
			f->flowlet += 1;
			f->flags &= ~DP_FLOW_F_OVERFLOW;
			if (planned != DP_RAIL_NONE) {
				/* the socket, when there is one, says more than the
				 * idle gap. The plan took the last burst for this
				 * one's size, so a burst the application wrote larger
				 * than that goes to the class's main rail from its
				 * first byte, whatever it still has in flight (it
				 * would move there in the middle of the burst
				 * anyway). Otherwise a flow whose last bytes are still
				 * in flight, sent less than an RTT ago, stays: this
				 * burst would overtake them (an unacknowledged tail
				 * sent an RTT ago has arrived; its ACK is only
				 * delayed). */
				__u64 unsent = 0, in_flight = 0, srtt_ns = 0;
				__u32 main = dp_main_rail(d);

				if (dp_tcp_state(skb, &unsent, &in_flight, &srtt_ns)) {
					if (main != DP_RAIL_NONE && planned != main &&
					    dp_burst_outgrows(unsent, f->last_burst)) {
						planned = main;
						f->flags |= DP_FLOW_F_OVERFLOW;
					} else if (in_flight && idle_ns <= srtt_ns) {
						planned = DP_RAIL_NONE;
					}
				}
			}
			target = dp_flowlet_begins(f, planned, target, cls);
		} else if (bursts) {
			/* in a burst: it stays where it began, unless the burst
			 * outgrew the plan (its flow's last burst was much
			 * smaller: the plan put it on a rail for less than it
			 * carries). Then it finishes on the class's main rail:
			 * a move reorders what is queued behind it once, where
			 * staying would hold the whole round back. */
			if (split && !(f->flags & DP_FLOW_F_OVERFLOW) &&
			    dp_burst_outgrows(f->burst_bytes, f->last_burst)) {
				__u32 main = dp_main_rail(d);

				f->flags |= DP_FLOW_F_OVERFLOW;
				if (main != DP_RAIL_NONE && main != target) {
					dp_flow_move(f, main, cls);
					target = main;
				}
			}
		} else if (idle || new_cell) {
			/* a new flowlet or cell: by completion time, or by the
			 * shares (deterministic per flow and flowlet number) */
			__u32 flowlet = f->flowlet + 1;
			__u32 placed = cc && vq ? dp_place_ecf(d, cc, vq, now)
						: dp_place(d, dp_flow_hash(&pkt->key, flowlet));

			f->flowlet = flowlet;
			if (cc && vq && placed < DP_MAX_RAILS && placed != target &&
			    !(cc->flags & DP_CELL_F_ANY_ORDER)) {
				/* in order: the cell would start on the other rail
				 * before the flow's last byte leaves this one */
				__u64 q = vq->finish_ns[placed & (DP_MAX_RAILS - 1)];

				if ((q > now ? q : now) < f->tail_ns)
					placed = target;
			}
			target = dp_flowlet_begins(f, placed, target, cls);
		}
	}
	if (cc && vq) {
		dp_vq_add(vq, cc, target, len, now);
		f->tail_ns = vq->finish_ns[target & (DP_MAX_RAILS - 1)];
	}
	if (bursts)
		f->burst_bytes += len;
	if (timed) {
		f->last_seen_ns = now;
		f->flags &= ~DP_FLOW_F_COARSE_TIME;
	} else {
		/* last_seen_ns is only shown as idle time: the coarse clock every
		 * 16th packet is enough, and it cannot start a flowlet later */
		f->flags |= DP_FLOW_F_COARSE_TIME;
		if (!(f->packets & 15))
			f->last_seen_ns = bpf_ktime_get_coarse_ns();
	}
	f->bytes += len;
	f->packets += 1;
	return target;
}

/* Set only by dp-bench-classifier before loading (BPF_PROG_TEST_RUN cannot
 * give a packet a timestamp type): a constant the verifier removes. */
const volatile __u32 dp_bench_tstamp_any = 0;

/* The packet's departure time when it is one on the monotonic clock (TCP
 * stamps every packet it sends with it), else 0. A receive timestamp (the
 * real-time clock) is never taken for it. */
static __always_inline __u64 dp_mono_tstamp(const struct __sk_buff *skb)
{
	if (dp_bench_tstamp_any)
		return skb->tstamp;
	if (skb->tstamp_type != BPF_SKB_TSTAMP_DELIVERY_MONO)
		return 0;
	return skb->tstamp;
}

/* Stamps the class's skb->priority and DSCP. Called last: after it, packet
 * pointers are invalid (bpf_skb_store_bytes). */
static __always_inline void dp_apply_qos(struct __sk_buff *skb, const struct dp_pkt *pkt, __u8 cls)
{
	__u32 idx = cls;
	struct dp_class_qos *q = bpf_map_lookup_elem(&dp_class_qos, &idx);
	__u8 hdr[2];

	if (!q || !q->flags)
		return;
	if (q->flags & DP_QOS_F_PRIORITY)
		skb->priority = q->priority;
	if (!(q->flags & DP_QOS_F_DSCP) || bpf_skb_load_bytes(skb, pkt->l3_off, hdr, 2))
		return;
	if (pkt->family == 2) {
		/* version/IHL and TOS form the header's first 16-bit word */
		__u8 tos = (__u8)((q->dscp << 2) | (hdr[1] & 3));
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
		__u8 tc = (__u8)((q->dscp << 2) | (((hdr[1] >> 4) & 0x0f) & 3));
		__u8 b0 = (__u8)((hdr[0] & 0xf0) | (tc >> 4));
		__u8 b1 = (__u8)((hdr[1] & 0x0f) | ((tc & 0x0f) << 4));

		if (b0 == hdr[0] && b1 == hdr[1])
			return;
		hdr[0] = b0;
		hdr[1] = b1;
		bpf_skb_store_bytes(skb, pkt->l3_off, hdr, 2, 0);
	}
}

SEC("tc")
int dp_egress(struct __sk_buff *skb)
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
	long ret;
	int exc;
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

	target = dp_flow_rail(&pkt, cls, rule, cfg->active_gen & 1, rail_here, skb->len,
			      cfg->flowlet_gap_ns, dp_mono_tstamp(skb), skb);
	dp_apply_qos(skb, &pkt, cls);
	if (target == rail_here || target >= DP_MAX_RAILS) {
		dp_count_tx(rail_here, cls, skb->len);
		return DP_PASS;
	}

	rail = bpf_map_lookup_elem(&dp_rails, &target);
	if (!rail || !(rail->flags & DP_RAIL_F_ENABLED) || !rail->ifindex) {
		dp_count_exception(rail_here, DP_EXC_TARGET_UNAVAILABLE);
		dp_count_tx(rail_here, cls, skb->len);
		return DP_PASS;
	}
	if (pkt.family == 2 && (rail->flags & DP_RAIL_F_GW4)) {
		nh.nh_family = 2;
		nh.ipv4_nh = rail->gw4;
	} else if (pkt.family == 10 && (rail->flags & DP_RAIL_F_GW6)) {
		nh.nh_family = 10;
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

SEC("tc")
int dp_ingress(struct __sk_buff *skb)
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
	if (exc < 0 && cfg)
		cls = dp_classify(&pkt, 0, cfg);
	c = dp_counters_of(rail_here, cls);
	if (c) {
		c->rx_bytes += skb->len;
		c->rx_packets += 1;
	}
	return DP_PASS;
}

/* The baseline the classifier's per-packet cost is measured against. */
SEC("tc")
int dp_empty(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

/*
 * sockops, attached to a cgroup v2 directory: per-rail and per-class TCP RTT,
 * retransmits, RTOs and segments sent, and per-flow RTT and retransmits in
 * dp_flows. Callbacks are enabled only for sockets whose flow is classified
 * and only in the daemon's network namespace (a cgroup spans namespaces).
 */
static __always_inline int dp_sock_key(const struct bpf_sock_ops *skops, struct dp_flow_key *k)
{
	__u32 family, v, lport, rport;

	DP_CTX_LOAD(family, skops->family);
	if (family == 2) { /* AF_INET */
		k->saddr[2] = bpf_htonl(0xffff);
		k->daddr[2] = bpf_htonl(0xffff);
		DP_CTX_LOAD(v, skops->local_ip4);
		k->saddr[3] = v;
		DP_CTX_LOAD(v, skops->remote_ip4);
		k->daddr[3] = v;
	} else if (family == 10) { /* AF_INET6: v4-mapped peers match the IPv4 form */
		DP_CTX_LOAD(v, skops->local_ip6[0]);
		k->saddr[0] = v;
		DP_CTX_LOAD(v, skops->local_ip6[1]);
		k->saddr[1] = v;
		DP_CTX_LOAD(v, skops->local_ip6[2]);
		k->saddr[2] = v;
		DP_CTX_LOAD(v, skops->local_ip6[3]);
		k->saddr[3] = v;
		DP_CTX_LOAD(v, skops->remote_ip6[0]);
		k->daddr[0] = v;
		DP_CTX_LOAD(v, skops->remote_ip6[1]);
		k->daddr[1] = v;
		DP_CTX_LOAD(v, skops->remote_ip6[2]);
		k->daddr[2] = v;
		DP_CTX_LOAD(v, skops->remote_ip6[3]);
		k->daddr[3] = v;
	} else {
		return -1;
	}
	DP_CTX_LOAD(lport, skops->local_port);	/* host order */
	DP_CTX_LOAD(rport, skops->remote_port); /* network order, in the high half */
	k->sport = bpf_htons((__u16)lport);
	k->dport = bpf_htons((__u16)bpf_ntohl(rport));
	k->proto = IPPROTO_TCP;
	return 0;
}

/* floor(log2(v)), 0 for 0 (BPF has no count-leading-zeros instruction) */
static __always_inline __u32 dp_log2(__u32 v)
{
	__u32 r = 0;

	if (v >= 1u << 16) {
		v >>= 16;
		r += 16;
	}
	if (v >= 1u << 8) {
		v >>= 8;
		r += 8;
	}
	if (v >= 1u << 4) {
		v >>= 4;
		r += 4;
	}
	if (v >= 1u << 2) {
		v >>= 2;
		r += 2;
	}
	if (v >= 1u << 1)
		r += 1;
	return r;
}

static __always_inline struct dp_tcp_stats *dp_tcp_of(const struct dp_flow *f)
{
	__u32 key;

	if (f->rail >= DP_MAX_RAILS || f->cls >= DP_MAX_CLASSES)
		return 0;
	key = f->rail * DP_MAX_CLASSES + f->cls;
	return bpf_map_lookup_elem(&dp_tcp, &key);
}

static __always_inline void dp_tcp_segs(struct bpf_sock_ops *skops, struct dp_flow *f,
					struct dp_tcp_stats *t)
{
	__u32 out = skops->data_segs_out;

	if (out > f->data_segs_out)
		t->segs_out += out - f->data_segs_out;
	f->data_segs_out = out;
}

SEC("sockops")
int dp_sockops(struct bpf_sock_ops *skops)
{
	struct dp_flow_key key = {};
	struct dp_tcp_stats *t;
	struct dp_config *cfg;
	struct dp_flow *f;
	__u32 zero = 0, op = skops->op;

	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB &&
	    op != BPF_SOCK_OPS_RTT_CB && op != BPF_SOCK_OPS_RETRANS_CB &&
	    op != BPF_SOCK_OPS_RTO_CB && op != BPF_SOCK_OPS_STATE_CB &&
	    op != BPF_SOCK_OPS_TCP_LISTEN_CB)
		return 1;
	cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!cfg || (cfg->netns_cookie && bpf_get_netns_cookie(skops) != cfg->netns_cookie))
		return 1;
	if (dp_sock_key(skops, &key))
		return 1;
	if (op == BPF_SOCK_OPS_TCP_LISTEN_CB) {
		dp_listen_note(skops, &key);
		return 1;
	}
	if (op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		dp_handover_accepted(skops, &key);
	f = bpf_map_lookup_elem(&dp_flows, &key);

	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB) {
		struct dp_pkt pkt = {.key = key};
		struct dp_class_tcp *ct;
		__u32 cls;

		/* the handshake went out through a rail, so a classified flow is
		 * in the table; if not, classify it by its ports */
		cls = f ? f->cls : dp_classify(&pkt, 0, cfg);
		if (cls >= DP_MAX_CLASSES)
			return 1;
		bpf_sock_ops_cb_flags_set(
			skops, BPF_SOCK_OPS_RTT_CB_FLAG | BPF_SOCK_OPS_RETRANS_CB_FLAG |
				       BPF_SOCK_OPS_RTO_CB_FLAG | BPF_SOCK_OPS_STATE_CB_FLAG);
		if (f)
			f->data_segs_out = skops->data_segs_out;
		/* the class's minimum RTO: a rail's RTT is far below the kernel's
		 * 200 ms, and after a failover the backoff must not outlast the
		 * move (a refusal leaves the kernel's) */
		ct = bpf_map_lookup_elem(&dp_class_tcp, &cls);
		if (ct && ct->rto_min_us) {
			int v = (int)ct->rto_min_us;

			bpf_setsockopt(skops, DP_SOL_TCP, TCP_BPF_RTO_MIN, &v, sizeof(v));
		}
		return 1;
	}
	if (!f)
		return 1;
	t = dp_tcp_of(f);
	if (!t)
		return 1;
	switch (op) {
	case BPF_SOCK_OPS_RTT_CB: {
		__u32 srtt = skops->srtt_us >> 3;
		__u32 b = dp_log2(srtt);

		if (b < DP_RTT_BUCKETS)
			t->rtt_hist[b] += 1;
		t->rtt_samples += 1;
		t->srtt_us_sum += srtt;
		f->srtt_us = srtt;
		dp_tcp_segs(skops, f, t);
		break;
	}
	case BPF_SOCK_OPS_RETRANS_CB: {
		__u32 segs = skops->args[1] ? skops->args[1] : 1;

		t->retrans_segs += segs;
		f->retrans_segs += segs;
		break;
	}
	case BPF_SOCK_OPS_RTO_CB:
		t->rto_events += 1;
		f->rto_events += 1;
		break;
	case BPF_SOCK_OPS_STATE_CB:
		dp_tcp_segs(skops, f, t);
		break;
	}
	return 1;
}

/* Connect-time placement (lib/connect.h): the separate topology. */
SEC("cgroup/connect4")
int dp_connect4(struct bpf_sock_addr *ctx)
{
	return dp_connect(ctx, DP_AF_INET);
}

SEC("cgroup/connect6")
int dp_connect6(struct bpf_sock_addr *ctx)
{
	return dp_connect(ctx, DP_AF_INET6);
}

SEC("cgroup/sendmsg4")
int dp_sendmsg4(struct bpf_sock_addr *ctx)
{
	return dp_connect(ctx, DP_AF_INET);
}

SEC("cgroup/sendmsg6")
int dp_sendmsg6(struct bpf_sock_addr *ctx)
{
	return dp_connect(ctx, DP_AF_INET6);
}

SEC("cgroup/getpeername4")
int dp_getpeername4(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET);
}

SEC("cgroup/getpeername6")
int dp_getpeername6(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET6);
}

SEC("cgroup/recvmsg4")
int dp_recvmsg4(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET);
}

SEC("cgroup/recvmsg6")
int dp_recvmsg6(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET6);
}

SEC("cgroup/getsockname4")
int dp_getsockname4(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET);
}

SEC("cgroup/getsockname6")
int dp_getsockname6(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET6);
}

/* Servers bound to one rail's address (lib/listen.h), attached to the
 * daemon's network namespace. */
SEC("sk_lookup")
int dp_sk_lookup(struct bpf_sk_lookup *ctx)
{
	return dp_handover(ctx);
}

SEC("cgroup/sock_release")
int dp_sock_release(struct bpf_sock *sk)
{
	return dp_sock_forget(sk);
}

/* Multipath classes (lib/mptcp.h): their TCP sockets are created as MPTCP. */
SEC("fmod_ret/update_socket_protocol")
int dp_update_socket_protocol(__u64 *ctx)
{
	return dp_mptcpify((int)ctx[0], (int)ctx[1], (int)ctx[2]);
}
