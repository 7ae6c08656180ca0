// SPDX-License-Identifier: GPL-2.0
/*
 * C shim for kernel APIs that the Rust kernel crate does not wrap and that are static inlines
 * or macros (tcp_sk(), crc32c()). Rust reaches these through src/shim.rs, which wraps each one
 * safely. Keep every function here small and free of policy.
 */
#include <linux/crc32.h>
#include <linux/in.h>
#include <linux/net.h>
#include <net/net_namespace.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "net_shim.h"

/* crc32c() over @len bytes at @p, continuing the raw (non-inverted) register @crc. */
u32 iwarp_shim_crc32c(u32 crc, const void *p, size_t len)
{
	return crc32c(crc, p, len);
}

/*
 * Creates a kernel TCP socket in the initial namespace, binds it to 127.0.0.1 on an ephemeral
 * port and releases it. Reports the port and the socket's initial write_seq. Returns 0 or a
 * negative errno.
 */
int iwarp_shim_tcp_probe(u16 *port, u32 *write_seq)
{
	struct sockaddr_in addr = {
		.sin_family = AF_INET,
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
		.sin_port = 0,
	};
	struct socket *sock;
	int rc;

	rc = sock_create_kern(&init_net, AF_INET, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (rc)
		return rc;
	rc = kernel_bind(sock, (struct sockaddr_unsized *)&addr, sizeof(addr));
	if (!rc)
		rc = kernel_getsockname(sock, (struct sockaddr *)&addr);
	if (rc >= 0) {
		*port = ntohs(addr.sin_port);
		*write_seq = READ_ONCE(tcp_sk(sock->sk)->write_seq);
		rc = 0;
	}
	sock_release(sock);
	return rc;
}
