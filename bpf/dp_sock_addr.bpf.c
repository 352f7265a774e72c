// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* cgroup sock_addr programs on the policy's cgroup: connect-time placement
 * in the separate topology (lib/connect.h). connect and sendmsg place a
 * socket on its class's rail; getpeername, recvmsg and getsockname give the
 * application back the addresses it used; sock_release forgets them. A UDP
 * server bound to one rail's address (lib/listen.h): post_bind counts it for
 * the daemon, recvmsg and sendmsg keep its handed-over peers' replies on
 * their rail, and its connect() to such a peer connects it to where the
 * peer really is. */
#include "lib/listen.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("cgroup/connect4")
int dp_connect4(struct bpf_sock_addr *ctx)
{
	return dp_connect_or_handed(ctx, DP_AF_INET);
}

SEC("cgroup/connect6")
int dp_connect6(struct bpf_sock_addr *ctx)
{
	return dp_connect_or_handed(ctx, DP_AF_INET6);
}

SEC("cgroup/sendmsg4")
int dp_sendmsg4(struct bpf_sock_addr *ctx)
{
	return dp_sendmsg(ctx, DP_AF_INET);
}

SEC("cgroup/sendmsg6")
int dp_sendmsg6(struct bpf_sock_addr *ctx)
{
	return dp_sendmsg(ctx, DP_AF_INET6);
}

SEC("cgroup/getpeername4")
int dp_getpeername4(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET);
}

SEC("cgroup/getpeername6")
int dp_getpeername6(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET6);
}

SEC("cgroup/recvmsg4")
int dp_recvmsg4(struct bpf_sock_addr *ctx)
{
	return dp_recvmsg(ctx, DP_AF_INET);
}

SEC("cgroup/recvmsg6")
int dp_recvmsg6(struct bpf_sock_addr *ctx)
{
	return dp_recvmsg(ctx, DP_AF_INET6);
}

SEC("cgroup/getsockname4")
int dp_getsockname4(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET);
}

SEC("cgroup/getsockname6")
int dp_getsockname6(struct bpf_sock_addr *ctx)
{
	return dp_restore(ctx, DP_AF_INET6);
}

SEC("cgroup/sock_release")
int dp_sock_release(struct bpf_sock *sk)
{
	dp_bind_forget(sk);
	return dp_sock_forget(sk);
}

SEC("cgroup/post_bind4")
int dp_post_bind4(struct bpf_sock *sk)
{
	return dp_bind_note(sk, DP_AF_INET);
}

SEC("cgroup/post_bind6")
int dp_post_bind6(struct bpf_sock *sk)
{
	return dp_bind_note(sk, DP_AF_INET6);
}
