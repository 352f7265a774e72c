// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * dp-bench-classifier's programs, never in the product's object:
 *   dp_bench_prelude - gives a test run's packet with a timestamp the type
 *                      TCP gives the packets it sends (BPF_PROG_TEST_RUN
 *                      takes skb->tstamp but not its type), then tail-calls
 *                      the program under test (dp_bench_next[0]); every case
 *                      runs through it, so its cost cancels out;
 *   dp_empty         - the floor: returns at once;
 *   dp_reference     - a minimal classifier to compare against: parse, one
 *                      port-array lookup, one flow-hash lookup updated in
 *                      place (bytes, last seen), one decision lookup, pass.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/parse.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct dp_ref_flow {
	__u64 bytes;
	__u64 last_seen_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} dp_bench_next SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_PORT_SPACE);
	__type(key, __u32);
	__type(value, __u32);
} dp_ref_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct dp_flow_key);
	__type(value, struct dp_ref_flow);
} dp_ref_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_CLASSES);
	__type(key, __u32);
	__type(value, __u32);
} dp_ref_decisions SEC(".maps");

SEC("tc")
int dp_bench_prelude(struct __sk_buff *skb)
{
	/* unconditional, so that every row pays for the call: without a
	 * timestamp the kernel refuses it and the packet stays without one */
	bpf_skb_set_tstamp(skb, skb->tstamp, BPF_SKB_TSTAMP_DELIVERY_MONO);
	bpf_tail_call(skb, &dp_bench_next, 0);
	return TC_ACT_SHOT;
}

SEC("tc")
int dp_empty(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

SEC("tc")
int dp_reference(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct dp_pkt pkt = {};
	struct dp_ref_flow *f;
	__u32 port, *cls, *rail;

	if (dp_parse(data, data_end, &pkt) >= 0)
		return TC_ACT_UNSPEC;
	port = bpf_ntohs(pkt.key.dport);
	cls = bpf_map_lookup_elem(&dp_ref_ports, &port);
	if (!cls || *cls >= DP_MAX_CLASSES)
		return TC_ACT_UNSPEC;
	f = bpf_map_lookup_elem(&dp_ref_flows, &pkt.key);
	if (f) {
		f->bytes += skb->len;
		f->last_seen_ns = bpf_ktime_get_coarse_ns();
	} else {
		struct dp_ref_flow nf = {skb->len, bpf_ktime_get_coarse_ns()};

		bpf_map_update_elem(&dp_ref_flows, &pkt.key, &nf, BPF_NOEXIST);
	}
	rail = bpf_map_lookup_elem(&dp_ref_decisions, cls);
	if (!rail)
		return TC_ACT_UNSPEC;
	return TC_ACT_UNSPEC;
}
