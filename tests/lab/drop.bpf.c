// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// Loss injection for the lab tests: drops a configurable share of packets.
// This kernel has no netem and no tc classifier but cls_bpf, so a BPF filter
// is the "tc drop filter".
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

const volatile __u32 drop_per_100000 = 1000; /* 1% */

SEC("tc")
int drop_some(struct __sk_buff *skb)
{
	return bpf_get_prandom_u32() % 100000 < drop_per_100000 ? TC_ACT_SHOT : TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
