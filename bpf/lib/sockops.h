/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sockops, attached to a cgroup v2 directory (bpf/dp_sockops.bpf.c): per-rail
 * and per-class TCP RTT, retransmits, RTOs and segments sent, and per-flow RTT
 * and retransmits in dp_flows; the class's minimum RTO; listeners noted for
 * the sk_lookup handover (lib/listen.h). Callbacks are enabled only for
 * sockets whose flow is classified and only in the daemon's network namespace
 * (a cgroup spans namespaces). */
#ifndef DP_BPF_SOCKOPS_H
#define DP_BPF_SOCKOPS_H

#include <linux/bpf.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "ctx.h"
#include "listen.h"
#include "maps.h"
#include "steer.h"

#define DP_SOL_TCP 6 /* SOL_TCP (IPPROTO_TCP) */
#define DP_SOL_SOCKET 1
#define DP_SO_MAX_PACING_RATE 47 /* asm-generic/socket.h */
#define DP_SO_RCVBUF 8
#define DP_TCP_USER_TIMEOUT 18 /* linux/tcp.h */
#define DP_TCP_RTO_MAX_MS 44   /* linux/tcp.h, Linux 6.15 */

static __always_inline int dp_sock_key(const struct bpf_sock_ops *skops, struct dp_flow_key *k)
{
	__u32 family, v, lport, rport;

	DP_CTX_LOAD(family, skops->family);
	if (family == DP_AF_INET) {
		k->saddr[2] = bpf_htonl(0xffff);
		k->daddr[2] = bpf_htonl(0xffff);
		DP_CTX_LOAD(v, skops->local_ip4);
		k->saddr[3] = v;
		DP_CTX_LOAD(v, skops->remote_ip4);
		k->daddr[3] = v;
	} else if (family == DP_AF_INET6) { /* v4-mapped peers match the IPv4 form */
		DP_CTX_LOAD_IP6(k->saddr, skops->local_ip6);
		DP_CTX_LOAD_IP6(k->daddr, skops->remote_ip6);
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

/* A multipath class's subflow is paced at most at its rail's capacity. The
 * kernel's MPTCP scheduler sends on the subflow whose queue would drain first
 * at the subflow's pacing rate, and a congestion control's estimate can be
 * several times the rail's rate (ACKs that arrive bunched): the narrow rail
 * then got more than its share, and each burst waited for its last bytes
 * there. Only sockets that stay on their rail, which cannot go faster than
 * it: every one in the separate topology (a connection lives on its rail's
 * addresses), the ones bound to a rail's device in the shared one (the
 * daemon's joins; the first subflow and a plain connection may be moved to a
 * wider rail there) and, at the accepting end there, the joins, which are
 * answered on the rail they arrived on (dp_accepted_join_rail). A fallback to
 * plain TCP is capped alike, harmlessly. */
static __always_inline void dp_pace_subflow(struct bpf_sock_ops *skops, __u32 rail, int stays)
{
	struct bpf_sock *sk = skops->sk;
	struct dp_rail *r;
	int v;

	if (!sk)
		return;
	r = bpf_map_lookup_elem(&dp_rails, &rail);
	if (!r || !r->subflow_pace)
		return;
	if (!stays && !(r->flags & DP_RAIL_F_CONNECT) && !sk->bound_dev_if)
		return;
	v = (int)r->subflow_pace;
	bpf_setsockopt(skops, DP_SOL_SOCKET, DP_SO_MAX_PACING_RATE, &v, sizeof(v));
}

/* The kernel's sockets as far as sockops reads a subflow's (CO-RE by name;
 * an MPTCP connection's socket begins with its struct sock too). */
struct sock_common___sub {
	__be16 skc_dport;
} __attribute__((preserve_access_index));

struct sock___sub {
	struct sock_common___sub __sk_common;
	int sk_rcvbuf;
	int sk_rx_dst_ifindex;
} __attribute__((preserve_access_index));

struct mptcp_sock___sub {
	struct sock___sub *first;
} __attribute__((preserve_access_index));

/* A subflow that joins an MPTCP connection whose receive buffer has already
 * grown gets that buffer. The kernel sizes a new subflow's buffer at
 * tcp_rmem[1] and raises it only when the connection's own buffer grows
 * again; a join made after the growth ended kept the default, and the
 * window it advertises was clamped to it (~115 KB). With the subflow that
 * advertises the connection's full window idle (the shared topology's first
 * subflow stands by), the sender ran out of window at every large burst and
 * waited for its 200 ms timer to learn that the window had opened. This runs
 * before the kernel sizes the window (tcp_init_transfer), so the clamp
 * follows. SO_RCVBUF fixes the subflow's size from then on (the kernel's
 * growth skips a locked buffer), capped at net.core.rmem_max; a connection
 * whose buffer has not grown yet is left to the kernel's growth, which takes
 * its subflows along. */
static __always_inline void dp_join_rcvbuf(struct bpf_sock_ops *skops)
{
	struct sock___sub *msk, *ssk;
	struct bpf_sock *sk = skops->sk;
	int v;

	if (!sk)
		return;
	msk = (struct sock___sub *)bpf_skc_to_mptcp_sock(sk);
	ssk = (struct sock___sub *)bpf_skc_to_tcp_sock(sk);
	if (!msk || !ssk || msk->sk_rcvbuf <= ssk->sk_rcvbuf)
		return;
	v = (int)((__u32)msk->sk_rcvbuf >> 1); /* the kernel doubles what SO_RCVBUF asks */
	bpf_setsockopt(skops, DP_SOL_SOCKET, DP_SO_RCVBUF, &v, sizeof(v));
}

/* PASSIVE_ESTABLISHED in the shared topology: the rail a join (not its
 * connection's first subflow, which floats with the class's decision) arrived
 * on, where the datapath answers it while that rail is up (dp_socket_rail in
 * lib/tc.h); or DP_RAIL_NONE. A join there has a port of its own (the
 * connecting daemon's free_port), so the first subflow is the one whose peer
 * port is the connection's first subflow's. */
static __always_inline __u32 dp_accepted_join_rail(struct bpf_sock_ops *skops, __be16 dport)
{
	struct bpf_sock *sk = skops->sk;
	struct mptcp_sock___sub *msk;
	struct sock___sub *ssk;
	__u32 rail;
	struct dp_rail *r;

	if (!sk)
		return DP_RAIL_NONE;
	msk = (struct mptcp_sock___sub *)bpf_skc_to_mptcp_sock(sk);
	ssk = (struct sock___sub *)bpf_skc_to_tcp_sock(sk);
	if (!msk || !ssk || msk->first->__sk_common.skc_dport == dport)
		return DP_RAIL_NONE;
	rail = dp_rail_of_ifindex((__u32)ssk->sk_rx_dst_ifindex);
	r = rail < DP_MAX_RAILS ? bpf_map_lookup_elem(&dp_rails, &rail) : 0;
	if (!r || !(r->flags & DP_RAIL_F_MP_UP))
		return DP_RAIL_NONE;
	return rail;
}

/* PASSIVE_ESTABLISHED of a socket the flow table does not hold: a join that
 * reached one of the daemon's join listeners (a server bound to another
 * rail's address), which is in the daemon's cgroup, not the class's. The
 * daemon notes each listener's class in dp_joins. */
static __always_inline __u32 dp_join_class(const struct dp_flow_key *k, __u32 *rail)
{
	struct dp_listen_key key = {.proto = IPPROTO_TCP};
	__u16 family = dp_local_of(k, key.addr);
	__u32 *cls;

	key.family = (__u8)family;
	key.port = bpf_ntohs(k->sport);
	cls = bpf_map_lookup_elem(&dp_joins, &key);
	if (!cls)
		return DP_CLASS_NONE;
	*rail = dp_local_rail(key.addr, family);
	return *cls;
}

static __always_inline int dp_sockops_run(struct bpf_sock_ops *skops)
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
		__u32 cls, rail = f ? f->rail : DP_RAIL_NONE;

		/* the handshake went out through a rail, so a classified flow is
		 * in the table; if not, classify it by its ports */
		cls = f ? f->cls : dp_classify(&pkt, 0, cfg);
		if (cls >= DP_MAX_CLASSES && op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
			cls = dp_join_class(&key, &rail);
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
		/* the class's longest backoff: after every rail was down, the
		 * first rail back is found within it, not after the minutes of
		 * the kernel's; the lifetime through an outage stays the
		 * kernel's by a user timeout, unless the application set one (a
		 * kernel without the option refuses it: the kernel's stays) */
		if (ct && ct->rto_max_ms) {
			int v = (int)ct->rto_max_ms, cur = 0;

			if (bpf_setsockopt(skops, DP_SOL_TCP, DP_TCP_RTO_MAX_MS, &v, sizeof(v)) == 0 &&
			    ct->user_timeout_ms &&
			    bpf_getsockopt(skops, DP_SOL_TCP, DP_TCP_USER_TIMEOUT, &cur, sizeof(cur)) == 0 &&
			    cur == 0) {
				v = (int)ct->user_timeout_ms;
				bpf_setsockopt(skops, DP_SOL_TCP, DP_TCP_USER_TIMEOUT, &v, sizeof(v));
			}
		}
		if (ct && (ct->flags & DP_CLASS_TCP_F_MULTIPATH)) {
			__u32 joined = DP_RAIL_NONE;

			dp_join_rcvbuf(skops);
			if (op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
				joined = dp_accepted_join_rail(skops, key.dport);
			if (joined < DP_MAX_RAILS)
				dp_pace_subflow(skops, joined, 1);
			else if (rail < DP_MAX_RAILS)
				dp_pace_subflow(skops, rail, 0);
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

#endif /* DP_BPF_SOCKOPS_H */
