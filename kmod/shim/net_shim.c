// SPDX-License-Identifier: GPL-2.0
/*
 * C shim for kernel APIs that the Rust kernel crate does not wrap and that are static inlines
 * or macros (tcp_sk(), crc32c()). Rust reaches these through src/shim.rs, which wraps each one
 * safely. Keep every function here small and free of policy.
 */
#include <linux/crc32.h>
#include <linux/file.h>
#include <linux/jiffies.h>
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

/*
 * Takes a reference on the connected TCP socket behind the caller's @fd. Returns it, or NULL
 * with *@err: -EBADF/-ENOTSOCK (not a socket), -EPROTONOSUPPORT (not TCP), -ENOTCONN (not
 * established).
 */
struct socket *iwarp_shim_sock_adopt(int fd, int *err)
{
	struct socket *sock = sockfd_lookup(fd, err);

	if (!sock)
		return NULL;
	if (sock->sk->sk_type != SOCK_STREAM || sock->sk->sk_protocol != IPPROTO_TCP ||
	    (sock->sk->sk_family != AF_INET && sock->sk->sk_family != AF_INET6)) {
		*err = -EPROTONOSUPPORT;
	} else if (READ_ONCE(sock->sk->sk_state) != TCP_ESTABLISHED) {
		*err = -ENOTCONN;
	} else {
		*err = 0;
		return sock;
	}
	sockfd_put(sock);
	return NULL;
}

/* Shuts the connection down and drops the reference iwarp_shim_sock_adopt() took. */
void iwarp_shim_sock_put(struct socket *sock)
{
	kernel_sock_shutdown(sock, SHUT_RDWR);
	sockfd_put(sock);
}

/* Sends all @len bytes (blocking). Returns 0 or a negative errno. */
int iwarp_shim_sock_send_all(struct socket *sock, const void *buf, size_t len)
{
	while (len) {
		struct kvec iov = { .iov_base = (void *)buf, .iov_len = len };
		struct msghdr msg = { .msg_flags = MSG_NOSIGNAL };
		int rc = kernel_sendmsg(sock, &msg, &iov, 1, len);

		if (rc < 0)
			return rc;
		if (rc == 0)
			return -EPIPE;
		buf += rc;
		len -= rc;
	}
	return 0;
}

/*
 * Receives exactly @len bytes, waiting at most @timeout_ms for each piece. Returns 0,
 * -ETIMEDOUT, -ECONNRESET (peer closed early) or another negative errno (e.g. -EINTR).
 */
int iwarp_shim_sock_recv_exact(struct socket *sock, void *buf, size_t len, unsigned int timeout_ms)
{
	long saved = READ_ONCE(sock->sk->sk_rcvtimeo);
	int rc = 0;

	WRITE_ONCE(sock->sk->sk_rcvtimeo, msecs_to_jiffies(timeout_ms));
	while (len) {
		struct kvec iov = { .iov_base = buf, .iov_len = len };
		struct msghdr msg = {};

		rc = kernel_recvmsg(sock, &msg, &iov, 1, len, MSG_WAITALL);
		if (rc == -EAGAIN)
			rc = -ETIMEDOUT;
		if (rc == 0)
			rc = -ECONNRESET;
		if (rc < 0)
			break;
		buf += rc;
		len -= rc;
		rc = 0;
	}
	WRITE_ONCE(sock->sk->sk_rcvtimeo, saved);
	return rc;
}

/* Sends the @n pieces of @iov (@len bytes in all), blocking until all are queued. */
int iwarp_shim_sock_sendv(struct socket *sock, struct kvec *iov, size_t n, size_t len)
{
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL };

	iov_iter_kvec(&msg.msg_iter, ITER_SOURCE, iov, n, len);
	while (msg_data_left(&msg)) {
		int rc = sock_sendmsg(sock, &msg);

		if (rc < 0)
			return rc;
		if (rc == 0)
			return -EPIPE;
	}
	return 0;
}

/* The connection's current MSS (what an FPDU must fit, RFC 5044 section 11.2). */
u32 iwarp_shim_sock_mss(struct socket *sock)
{
	return READ_ONCE(tcp_sk(sock->sk)->mss_cache);
}
