// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The tc programs, attached with clsact on every rail (lib/tc.h):
 *   dp_egress  - classify, place the flow on a rail, redirect when the
 *                decided rail is not the one the route chose;
 *   dp_ingress - per-rail, per-class receive accounting, and a server
 *                bound to another rail's address made reachable (lib/listen.h).
 *
 * Every dp_*.bpf.c in this directory is one attach family's entry points, and
 * nothing else; the logic is in lib/. They are linked into one object and one
 * skeleton (bpftool gen object; cmake/BpfObject.cmake), whose maps they share.
 * Which program attaches where, and under which pin, is the daemon's table
 * (include/dualpath/kernel/programs.h).
 */
#include "lib/tc.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tc")
int dp_egress(struct __sk_buff *skb)
{
	return dp_tc_egress(skb);
}

SEC("tc")
int dp_ingress(struct __sk_buff *skb)
{
	return dp_tc_ingress(skb);
}
