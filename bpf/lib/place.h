/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Flow placement at tc egress (shared topology): the rail each packet of a
 * classified flow goes out on, and the flow table kept for it.
 *
 * A class whose decision gives every rail less than its whole share is split.
 * One function per placement mode, chosen per packet by dp_flow_rail:
 *   - flowlets (the default): a new flow, and a flow's next flowlet after an
 *     idle gap, are placed by the shares, by hash (deterministic per flow and
 *     flowlet number);
 *   - cells (dp_cells): each cell of a flow, and each new flow, goes where it
 *     would finish first (dp_place_ecf), but a cell changes rail only if it
 *     cannot overtake the flow's own bytes on the rail it leaves (unless
 *     DP_CELL_F_ANY_ORDER);
 *   - bursts (DP_CELL_F_BURSTS): bursts are measured split or not, and, while
 *     split, a flow's next burst goes where the daemon planned it (dp_plans);
 *     a flow without a plan stays; a stream (a burst without end) follows its
 *     plan every MiB.
 * In every mode a flow whose rail lost its share moves at once. */
#ifndef DP_BPF_PLACE_H
#define DP_BPF_PLACE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "steer.h"

/* The fields of the kernel's struct tcp_sock that burst placement reads,
 * relocated by name against the running kernel's BTF (CO-RE). */
struct tcp_sock {
	__u32 srtt_us; /* smoothed RTT << 3 */
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 write_seq;
} __attribute__((preserve_access_index));

/* What placing one packet needs, read once by dp_flow_rail. */
struct dp_place_in {
	const struct dp_decision *d;
	const struct dp_cell_cfg *cc; /* placed by cells: their settings (and vq); else NULL */
	struct dp_vq *vq;
	struct __sk_buff *skb; /* for the socket's state at a burst's start */
	__u64 now;	       /* 0 unless the mode needs the time */
	__u32 rail_here;       /* the rail the route chose */
	__u32 len;
	__u8 cls;
	int split;  /* no rail holds the class's whole share */
	int bursts; /* the class is placed by bursts */
};

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

/* A rail for a new flow, or for the flow's flowlet number `flowlet` when its
 * rail lost its share: where a cell finishes first (cells), else by the
 * shares; the rail the route chose when no rail is usable. */
static __always_inline __u32 dp_place_fresh(const struct dp_place_in *in,
					    const struct dp_flow_key *key, __u32 flowlet)
{
	__u32 r = in->cc ? dp_place_ecf(in->d, in->cc, in->vq, in->now)
			 : dp_place(in->d, dp_flow_hash(key, flowlet));

	return r == DP_RAIL_NONE ? in->rail_here : r;
}

/* The first packet of a flow: placed, and entered in the flow table. */
static __always_inline __u32 dp_flow_begins(const struct dp_place_in *in, const struct dp_pkt *pkt,
					    __u8 rule, __u32 gen)
{
	__u32 target = dp_place_fresh(in, &pkt->key, 0);
	__u64 now = in->now ? in->now : bpf_ktime_get_ns();
	struct dp_flow nf = {};
	struct dp_counters *c;

	if (in->cc) {
		dp_vq_add(in->vq, in->cc, target, in->len, now);
		nf.tail_ns = in->vq->finish_ns[target & (DP_MAX_RAILS - 1)];
	}
	nf.first_seen_ns = now;
	nf.last_seen_ns = now;
	nf.bytes = in->len;
	nf.packets = 1;
	nf.gen = gen;
	nf.cls = in->cls;
	nf.rule = rule;
	nf.rail = target;
	nf.flowlet = 1;
	nf.burst_bytes = in->bursts ? in->len : 0;
	if (bpf_map_update_elem(&dp_flows, &pkt->key, &nf, BPF_NOEXIST) == 0) {
		c = dp_counters_of(target, in->cls);
		if (c)
			c->flows_placed += 1;
	} else {
		dp_count_exception(in->rail_here, DP_EXC_FLOW_TABLE_FULL);
	}
	return target;
}

/* A flow its own socket holds on `rail` (lib/tc.h, dp_socket_rail): in the
 * flow table on that rail, for its statistics and dpctl flow list, and never
 * placed. */
static __always_inline void dp_flow_held(const struct dp_pkt *pkt, __u8 cls, __u8 rule, __u32 gen,
					 __u32 rail, __u32 len)
{
	struct dp_flow *f = bpf_map_lookup_elem(&dp_flows, &pkt->key);
	struct dp_counters *c;

	if (!f) {
		struct dp_flow nf = {};

		nf.first_seen_ns = bpf_ktime_get_ns();
		nf.last_seen_ns = nf.first_seen_ns;
		nf.bytes = len;
		nf.packets = 1;
		nf.gen = gen;
		nf.cls = cls;
		nf.rule = rule;
		nf.rail = rail;
		nf.flowlet = 1;
		nf.flags = DP_FLOW_F_COARSE_TIME;
		if (bpf_map_update_elem(&dp_flows, &pkt->key, &nf, BPF_NOEXIST) == 0) {
			c = dp_counters_of(rail, cls);
			if (c)
				c->flows_placed += 1;
		}
		return;
	}
	f->cls = cls;
	f->rule = rule;
	f->gen = gen;
	if (f->rail != rail)
		dp_flow_move(f, rail, cls);
	f->flags |= DP_FLOW_F_COARSE_TIME;
	if (!(f->packets & 15))
		f->last_seen_ns = bpf_ktime_get_coarse_ns();
	f->bytes += len;
	f->packets += 1;
}

/* Bursts: a new burst (after an idle gap) goes where the daemon planned it,
 * if the class is split. The socket, when there is one, says more than the
 * idle gap. The plan took the last burst for this one's size, so a burst the
 * application wrote larger than that goes to the class's main rail from its
 * first byte, whatever it still has in flight (it would move there in the
 * middle of the burst anyway). Otherwise a flow whose last bytes are still in
 * flight, sent less than an RTT ago, stays: this burst would overtake them
 * (an unacknowledged tail sent an RTT ago has arrived; its ACK is only
 * delayed). */
static __always_inline __u32 dp_burst_begins(const struct dp_place_in *in, struct dp_flow *f,
					     const struct dp_flow_key *key, __u64 idle_ns,
					     __u32 target)
{
	const struct dp_plan *p = in->split ? bpf_map_lookup_elem(&dp_plans, key) : 0;
	__u32 planned = dp_plan_rail(p, in->d);

	f->last_burst = f->burst_bytes;
	f->burst_bytes = 0;
	f->flowlet += 1;
	f->flags &= ~(DP_FLOW_F_OVERFLOW | DP_FLOW_F_STREAM);
	if (p && (p->flags & DP_PLAN_F_STREAM)) {
		/* a stream: its plan is where it goes, whatever it has queued */
		f->flags |= DP_FLOW_F_STREAM;
	} else if (planned != DP_RAIL_NONE) {
		__u64 unsent = 0, in_flight = 0, srtt_ns = 0;
		__u32 main = dp_main_rail(in->d);

		if (dp_tcp_state(in->skb, &unsent, &in_flight, &srtt_ns)) {
			if (main != DP_RAIL_NONE && planned != main &&
			    dp_burst_outgrows(unsent, f->last_burst)) {
				planned = main;
				f->flags |= DP_FLOW_F_OVERFLOW;
			} else if (in_flight && idle_ns <= srtt_ns) {
				planned = DP_RAIL_NONE;
			}
		}
	}
	return dp_flowlet_begins(f, planned, target, in->cls);
}

/* Bursts: inside a burst the flow stays where the burst began, with two
 * exceptions. A stream (its plan says DP_PLAN_F_STREAM) follows its plan,
 * looked up every DP_STREAM_STEP bytes the flow sends (a stream without gaps
 * never begins another burst), and nothing else moves it. A burst that
 * outgrew the plan (its flow's last burst was much smaller: the plan put it
 * on a rail for less than it carries) finishes on the class's main rail: a
 * move reorders what is queued behind it once, where staying would hold the
 * whole round back. */
static __always_inline __u32 dp_burst_continues(const struct dp_place_in *in, struct dp_flow *f,
						const struct dp_flow_key *key, __u32 target)
{
	__u32 main;

	if (!in->split)
		return target;
	if ((f->bytes >> DP_STREAM_STEP_SHIFT) != ((f->bytes + in->len) >> DP_STREAM_STEP_SHIFT)) {
		const struct dp_plan *p = bpf_map_lookup_elem(&dp_plans, key);

		if (p && (p->flags & DP_PLAN_F_STREAM)) {
			__u32 planned = dp_plan_rail(p, in->d);

			f->flags |= DP_FLOW_F_STREAM;
			if (planned != DP_RAIL_NONE && planned != target) {
				dp_flow_move(f, planned, in->cls);
				target = planned;
			}
		} else {
			f->flags &= ~DP_FLOW_F_STREAM;
		}
	}
	if ((f->flags & (DP_FLOW_F_OVERFLOW | DP_FLOW_F_STREAM)) ||
	    !dp_burst_outgrows(f->burst_bytes, f->last_burst))
		return target;
	main = dp_main_rail(in->d);
	f->flags |= DP_FLOW_F_OVERFLOW;
	if (main != DP_RAIL_NONE && main != target) {
		dp_flow_move(f, main, in->cls);
		target = main;
	}
	return target;
}

/* Flowlets and cells: a new flowlet or cell is placed by completion time
 * (cells) or by the shares. In order (cells without DP_CELL_F_ANY_ORDER): a
 * cell stays if it would start on the other rail before the flow's last byte
 * leaves this one. */
static __always_inline __u32 dp_flowlet_next(const struct dp_place_in *in, struct dp_flow *f,
					     const struct dp_flow_key *key, __u32 target)
{
	__u32 flowlet = f->flowlet + 1;
	__u32 placed = in->cc ? dp_place_ecf(in->d, in->cc, in->vq, in->now)
			      : dp_place(in->d, dp_flow_hash(key, flowlet));

	f->flowlet = flowlet;
	if (in->cc && placed < DP_MAX_RAILS && placed != target &&
	    !(in->cc->flags & DP_CELL_F_ANY_ORDER)) {
		__u64 q = in->vq->finish_ns[placed & (DP_MAX_RAILS - 1)];

		if ((q > in->now ? q : in->now) < f->tail_ns)
			placed = target;
	}
	return dp_flowlet_begins(f, placed, target, in->cls);
}

/* Returns the rail the flow goes out on, updating the flow table. */
static __always_inline __u32 dp_flow_rail(const struct dp_pkt *pkt, __u8 cls, __u8 rule, __u32 gen,
					  __u32 rail_here, __u32 len, __u64 flowlet_gap_ns,
					  __u64 mono_tstamp, struct __sk_buff *skb)
{
	__u32 idx = cls, zero = 0;
	struct dp_decision *d = bpf_map_lookup_elem(&dp_decisions, &idx);
	struct dp_place_in in = {.skb = skb, .rail_here = rail_here, .len = len, .cls = cls};
	struct dp_flow *f;
	__u32 target;
	int timed;

	if (!d)
		return rail_here;
	in.d = d;
	in.split = dp_decision_split(d);
	if (in.split) {
		in.cc = dp_cells_of(cls);
		if (in.cc)
			in.vq = bpf_map_lookup_elem(&dp_vq, &zero);
		if (!in.vq)
			in.cc = 0;
	}
	/* bursts are measured split or not, so that the daemon knows them
	 * before it splits the class */
	in.bursts = flowlet_gap_ns && dp_bursts_of(cls);
	/* the time is needed only for a split class (flowlets, cells) and for
	 * bursts: a TCP packet carries it (its departure time, set by TCP on the
	 * monotonic clock); others read the clock */
	timed = (in.split && (flowlet_gap_ns || in.cc)) || in.bursts;
	in.now = timed ? (mono_tstamp ? mono_tstamp : bpf_ktime_get_ns()) : 0;

	f = bpf_map_lookup_elem(&dp_flows, &pkt->key);
	if (!f)
		return dp_flow_begins(&in, pkt, rule, gen);

	/* flow entries are shared by all CPUs; their statistics are approximate */
	f->cls = cls;
	f->rule = rule;
	f->gen = gen;
	target = f->rail;

	if (target >= DP_MAX_RAILS || !d->share[target & (DP_MAX_RAILS - 1)] ||
	    !dp_rail_usable(target)) {
		/* the rail lost its share (operator move, failover): re-place */
		__u32 flowlet = f->flowlet + 1;
		__u32 moved = dp_place_fresh(&in, &pkt->key, flowlet);

		if (moved != target) {
			f->flowlet = flowlet;
			dp_flow_move(f, moved, cls);
		}
		target = moved;
	} else if (timed && !(f->flags & DP_FLOW_F_COARSE_TIME)) {
		__u64 idle_ns = in.now - f->last_seen_ns;
		int idle = flowlet_gap_ns && idle_ns > flowlet_gap_ns;
		int new_cell = 0;

		if (in.cc) {
			__u32 sh = in.cc->cell_shift & 63;

			new_cell = (f->bytes >> sh) != ((f->bytes + len) >> sh);
		}
		if (in.bursts && idle)
			target = dp_burst_begins(&in, f, &pkt->key, idle_ns, target);
		else if (in.bursts)
			target = dp_burst_continues(&in, f, &pkt->key, target);
		else if (idle || new_cell)
			target = dp_flowlet_next(&in, f, &pkt->key, target);
	}
	if (in.cc) {
		dp_vq_add(in.vq, in.cc, target, len, in.now);
		f->tail_ns = in.vq->finish_ns[target & (DP_MAX_RAILS - 1)];
	}
	if (in.bursts)
		f->burst_bytes += len;
	if (timed) {
		f->last_seen_ns = in.now;
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

#endif /* DP_BPF_PLACE_H */
