// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Multipath classes (lib/mptcp.h): their TCP sockets are created as MPTCP.
 * fmod_ret on update_socket_protocol (Linux 6.6); the daemon loads it only
 * where the kernel allows the hook. */
#include "lib/mptcp.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("fmod_ret/update_socket_protocol")
int dp_update_socket_protocol(__u64 *ctx)
{
	return dp_mptcpify((int)ctx[0], (int)ctx[1], (int)ctx[2]);
}
