// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// A program that is not dualpath's: the lab tests attach it as a "foreign" tc filter
// and check that dualpath never removes or replaces it.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
SEC("tc") int foreign_pass(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}
char LICENSE[] SEC("license") = "GPL";
