// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sk_lookup on the daemon's network namespace: a connection for this node's
 * address on one rail reaches a server bound to its address on another
 * (lib/listen.h). */
#include "lib/listen.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("sk_lookup")
int dp_sk_lookup(struct bpf_sk_lookup *ctx)
{
	return dp_handover(ctx);
}
