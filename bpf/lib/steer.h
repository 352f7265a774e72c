/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Classification, flow placement and accounting. Hook-neutral: no __sk_buff
 * access here; entry files pass in what they read from their context. */
#ifndef DP_BPF_STEER_H
#define DP_BPF_STEER_H

#include <linux/in.h>

#include "maps.h"
#include "parse.h"

static __always_inline void dp_count_exception(__u32 rail, __u32 reason)
{
	__u32 key = rail * DP_EXC_MAX + reason;
	__u64 *v = bpf_map_lookup_elem(&dp_exceptions, &key);

	if (v)
		*v += 1;
}

static __always_inline struct dp_counters *dp_counters_of(__u32 rail, __u32 cls)
{
	__u32 key;

	if (cls >= DP_MAX_CLASSES)
		cls = DP_CLASS_UNCLASSIFIED;
	key = rail * DP_MAX_CLASSES + cls;
	return bpf_map_lookup_elem(&dp_counters, &key);
}

static __always_inline __u32 dp_rail_of_ifindex(__u32 ifindex)
{
	struct dp_ifindex_val *v;

	if (ifindex < DP_IFINDEX_DIRECT) {
		__u32 *r = bpf_map_lookup_elem(&dp_rail_by_ifindex, &ifindex);

		if (!r || !*r || *r > DP_MAX_RAILS)
			return DP_RAIL_NONE;
		return *r - 1;
	}
	v = bpf_map_lookup_elem(&dp_ifindex, &ifindex);
	if (!v || v->rail >= DP_MAX_RAILS)
		return DP_RAIL_NONE;
	return v->rail;
}

/* Where a hook finds the cgroup of the socket it classifies. */
#define DP_CGROUP_NONE 0    /* no socket at hand (ingress, sockops): cgroups not used */
#define DP_CGROUP_SKB 1	    /* the packet's socket (tc egress) */
#define DP_CGROUP_CURRENT 2 /* the calling task (cgroup sock_addr hooks) */

/* With `how` a constant, only the helpers of that hook are emitted. */
static __always_inline __u64 dp_cgroup_id(void *ctx, int how)
{
	if (how == DP_CGROUP_SKB)
		return bpf_skb_cgroup_id(ctx);
	return bpf_get_current_cgroup_id();
}

static __always_inline __u64 dp_cgroup_ancestor(void *ctx, int how, int level)
{
	if (how == DP_CGROUP_SKB)
		return bpf_skb_ancestor_cgroup_id(ctx, level);
	return bpf_get_current_ancestor_cgroup_id(level);
}

/* The class of the socket's cgroup (abi.h, dp_cgroups): one cache lookup; a
 * miss walks the ancestors from the root down and remembers the deepest
 * named one's class, or that there is none. */
static __always_inline __u8 dp_cgroup_class(void *ctx, int how, __u32 gen)
{
	struct dp_cgroup_key k = {.gen = gen};
	struct dp_cgroup_val out = {.cls = DP_CLASS_NONE};
	struct dp_cgroup_val *v;

	k.id = dp_cgroup_id(ctx, how);
	if (!k.id)
		return DP_CLASS_NONE;
	v = bpf_map_lookup_elem(&dp_cgroup_cache, &k);
	if (v)
		return v->cls;
	for (int level = 1; level <= DP_CGROUP_MAX_LEVEL; level++) {
		struct dp_cgroup_key a = {.gen = gen};

		a.id = dp_cgroup_ancestor(ctx, how, level);
		if (!a.id)
			break;
		v = bpf_map_lookup_elem(&dp_cgroups, &a);
		if (v && v->cls < DP_MAX_CLASSES)
			out.cls = v->cls;
		if (a.id == k.id)
			break;
	}
	bpf_map_update_elem(&dp_cgroup_cache, &k, &out, BPF_ANY);
	return out.cls;
}

/* Socket mark first, then port (destination before source), then the
 * socket's cgroup, then the default class. `rule` says which matched. */
/* The mark bits dualpath uses and its redirect bit (dp_mark_bits). */
static __always_inline void dp_mark_cfg(__u32 *mask, __u32 *redirect)
{
	__u32 zero = 0;
	struct dp_mark_bits *b = bpf_map_lookup_elem(&dp_mark_bits, &zero);

	if (b && b->redirect) {
		*mask = b->mask;
		*redirect = b->redirect;
	} else {
		*mask = 0xffffffffu;
		*redirect = DP_MARK_REDIRECTED;
	}
}

static __always_inline __u8 dp_classify_rule(const struct dp_pkt *pkt, __u32 mark,
					     const struct dp_config *cfg, __u8 *rule, void *ctx,
					     int how)
{
	__u32 gen = cfg->active_gen & 1;
	struct dp_port_entry *pe;
	__u32 key;
	__u32 base = pkt->key.proto == IPPROTO_TCP ? DP_PORT_TCP_DST : DP_PORT_UDP_DST;

	/* mark: the caller keeps only dualpath's bits (dp_mark_cfg); others'
	 * bits are not ours to read */
	if (mark) {
		struct dp_mark_key mk = {.gen = gen, .mark = mark};
		struct dp_mark_val *mv = bpf_map_lookup_elem(&dp_marks, &mk);

		if (mv && mv->cls < DP_MAX_CLASSES) {
			*rule = DP_RULE_MARK;
			return mv->cls;
		}
		/* a path's fwmark: the socket asked for that path; not steered */
		if (mv && mv->cls == DP_CLASS_NONE) {
			*rule = DP_RULE_NONE;
			return DP_CLASS_NONE;
		}
	}

	key = gen * DP_PORT_SPACE + bpf_ntohs(pkt->key.dport);
	pe = bpf_map_lookup_elem(&dp_ports, &key);
	if (pe && base < DP_PORT_SLOTS && pe->cls[base] < DP_MAX_CLASSES) {
		*rule = DP_RULE_PORT;
		return pe->cls[base];
	}
	key = gen * DP_PORT_SPACE + bpf_ntohs(pkt->key.sport);
	pe = bpf_map_lookup_elem(&dp_ports, &key);
	if (pe && base + 1 < DP_PORT_SLOTS && pe->cls[base + 1] < DP_MAX_CLASSES) {
		*rule = DP_RULE_PORT;
		return pe->cls[base + 1];
	}

	if (how != DP_CGROUP_NONE) {
		__u32 zero = 0;
		__u32 *gens = bpf_map_lookup_elem(&dp_cgroup_gens, &zero);

		if (gens && (*gens & (1u << gen))) {
			__u8 cls = dp_cgroup_class(ctx, how, gen);

			if (cls < DP_MAX_CLASSES) {
				*rule = DP_RULE_CGROUP;
				return cls;
			}
		}
	}

	if (cfg->default_class < DP_MAX_CLASSES) {
		*rule = DP_RULE_DEFAULT;
		return cfg->default_class;
	}
	*rule = DP_RULE_NONE;
	return DP_CLASS_NONE;
}

/* Without a socket at hand: mark, ports, default class. */
static __always_inline __u8 dp_classify(const struct dp_pkt *pkt, __u32 mark,
					const struct dp_config *cfg)
{
	__u8 rule;

	return dp_classify_rule(pkt, mark, cfg, &rule, 0, DP_CGROUP_NONE);
}

/* A deterministic 32-bit hash of the flow key and a salt (the flowlet number). */
static __always_inline __u32 dp_flow_hash(const struct dp_flow_key *k, __u32 salt)
{
	__u32 h = 0x9e3779b9u ^ salt;
	const __u32 *w = (const __u32 *)k;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*k) / 4); i++) {
		h ^= w[i];
		h *= 0x85ebca6bu;
		h ^= h >> 13;
	}
	h ^= h >> 16;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* A rail that may take traffic: `flag` is DP_RAIL_F_ENABLED for redirects,
 * DP_RAIL_F_CONNECT for connect-time placement. */
static __always_inline int dp_rail_usable_for(__u32 rail, __u32 flag)
{
	struct dp_rail *r;

	if (rail >= DP_MAX_RAILS)
		return 0;
	r = bpf_map_lookup_elem(&dp_rails, &rail);
	return r && (r->flags & flag) && r->ifindex;
}

static __always_inline int dp_rail_usable(__u32 rail)
{
	return dp_rail_usable_for(rail, DP_RAIL_F_ENABLED);
}

/* A class is split when no single rail holds its whole share: only then can a
 * new flowlet land elsewhere, so only then is flowlet timing needed. */
static __always_inline int dp_decision_split(const struct dp_decision *d)
{
#pragma unroll
	for (int r = 0; r < DP_MAX_RAILS; r++)
		if (d->share[r] >= DP_SHARE_SCALE)
			return 0;
	return 1;
}

/* Weighted choice over rails with a share and usable (by `flag`);
 * DP_RAIL_NONE if none. */
static __always_inline __u32 dp_place_by(const struct dp_decision *d, __u32 hash, __u32 flag)
{
	__u32 pick = hash % DP_SHARE_SCALE;
	__u32 acc = 0;
	__u32 fallback = DP_RAIL_NONE;

#pragma unroll
	for (__u32 r = 0; r < DP_MAX_RAILS; r++) {
		__u32 s = d->share[r];

		if (!s || !dp_rail_usable_for(r, flag))
			continue;
		if (fallback == DP_RAIL_NONE)
			fallback = r;
		acc += s;
		if (pick < acc)
			return r;
	}
	/* shares of usable rails sum below the scale: use the first usable one */
	return fallback;
}

static __always_inline __u32 dp_place(const struct dp_decision *d, __u32 hash)
{
	return dp_place_by(d, hash, DP_RAIL_F_ENABLED);
}

/* Flowcells (abi.h, dp_cell_cfg): the cell settings when class `cls` is
 * placed by cells, else NULL. */
static __always_inline const struct dp_cell_cfg *dp_cells_of(__u8 cls)
{
	__u32 zero = 0;
	const struct dp_cell_cfg *cc = bpf_map_lookup_elem(&dp_cells, &zero);

	if (!cc || !cc->cell_shift || (cc->flags & DP_CELL_F_BURSTS) || cls >= DP_MAX_CLASSES ||
	    !((cc->class_mask >> cls) & 1))
		return 0;
	return cc;
}

/* Bursts (abi.h, DP_CELL_F_BURSTS): whether class `cls` is placed a burst at
 * a time by the daemon's plan. */
static __always_inline int dp_bursts_of(__u8 cls)
{
	__u32 zero = 0;
	const struct dp_cell_cfg *cc = bpf_map_lookup_elem(&dp_cells, &zero);

	return cc && (cc->flags & DP_CELL_F_BURSTS) && cls < DP_MAX_CLASSES &&
	       ((cc->class_mask >> cls) & 1);
}

/* The usable rail with the largest share of the class (the lowest slot on a
 * tie), or DP_RAIL_NONE. */
static __always_inline __u32 dp_main_rail(const struct dp_decision *d)
{
	__u32 best = DP_RAIL_NONE, best_share = 0;

#pragma unroll
	for (__u32 r = 0; r < DP_MAX_RAILS; r++) {
		if (d->share[r] > best_share && dp_rail_usable(r)) {
			best = r;
			best_share = d->share[r];
		}
	}
	return best;
}

/* A burst of `bytes` outgrows the plan made for the flow's last burst: it is
 * half as large again, and 64 KiB, past it. */
static __always_inline int dp_burst_outgrows(__u64 bytes, __u64 last_burst)
{
	return last_burst && bytes > last_burst + (last_burst >> 1) + 65536;
}

/* The rail of plan `p` (dp_plans), if it has a share in the class's
 * decision and is usable; else DP_RAIL_NONE. dp_planned_rail: the plan for
 * the flow's next burst. */
static __always_inline __u32 dp_plan_rail(const struct dp_plan *p, const struct dp_decision *d)
{
	__u32 r;

	if (!p || p->rail >= DP_MAX_RAILS)
		return DP_RAIL_NONE;
	r = p->rail & (DP_MAX_RAILS - 1);
	if (!d->share[r] || !dp_rail_usable(r))
		return DP_RAIL_NONE;
	return r;
}

static __always_inline __u32 dp_planned_rail(const struct dp_flow_key *key,
					     const struct dp_decision *d)
{
	return dp_plan_rail(bpf_map_lookup_elem(&dp_plans, key), d);
}

/* Earliest completion first: the rail with a share and usable where a cell
 * put now would finish first, behind what the rail's virtual queue holds;
 * DP_RAIL_NONE if none. Ties go to the lower rail slot. */
static __always_inline __u32 dp_place_ecf(const struct dp_decision *d, const struct dp_cell_cfg *cc,
					  const struct dp_vq *vq, __u64 now)
{
	__u32 kib_shift = (cc->cell_shift & 31) - 10; /* cells are at least 4 KiB */
	__u64 best_t = ~0ull;
	__u32 best = DP_RAIL_NONE;

#pragma unroll
	for (__u32 r = 0; r < DP_MAX_RAILS; r++) {
		__u64 ns = cc->ns_per_kib[r];
		__u64 t = vq->finish_ns[r] > now ? vq->finish_ns[r] : now;

		if (!d->share[r] || !ns || !dp_rail_usable(r))
			continue;
		t += ns << (kib_shift & 31);
		if (t < best_t) {
			best_t = t;
			best = r;
		}
	}
	return best;
}

/* `len` bytes of a cell join rail's virtual queue. Both CPUs write it
 * without a lock: a lost update makes the queue a packet shorter. */
static __always_inline void dp_vq_add(struct dp_vq *vq, const struct dp_cell_cfg *cc, __u32 rail,
				      __u32 len, __u64 now)
{
	__u64 start;

	if (rail >= DP_MAX_RAILS)
		return;
	rail &= DP_MAX_RAILS - 1;
	start = vq->finish_ns[rail] > now ? vq->finish_ns[rail] : now;
	vq->finish_ns[rail] = start + (((__u64)len * cc->ns_per_kib[rail]) >> 10);
}

#endif /* DP_BPF_STEER_H */
