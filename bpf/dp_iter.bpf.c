// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Iterators the daemon runs in its network namespace: UDP servers and TCP
 * listeners bound to one rail's address into dp_listeners, for the
 * sk_lookup handover (lib/listen.h). */
#include "lib/listen.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("iter/udp")
int dp_udp_servers(struct bpf_iter__udp *ctx)
{
	return dp_udp_note(ctx);
}

SEC("iter/tcp")
int dp_tcp_listeners(struct bpf_iter__tcp *ctx)
{
	return dp_tcp_listener_note(ctx);
}
