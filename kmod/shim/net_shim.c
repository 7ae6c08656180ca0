// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel TCP sockets and crc32c: what src/socket/mod.rs and src/shim.rs wrap (static inlines,
 * macros, struct fields). Keep every function here small and free of policy.
 */
#include <linux/bvec.h>
#include <linux/crc32.h>
#include <linux/err.h>
#include <linux/file.h>
#include <linux/jiffies.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/net.h>
#include <linux/nsproxy.h>
#include <linux/skbuff.h>
#include <linux/slab.h>
#include <net/ipv6.h>
#include <net/net_namespace.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "shim.h"

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
 * Takes a reference on the connected TCP socket behind the caller's @fd. Returns it, or an
 * ERR_PTR: -EBADF/-ENOTSOCK (not a socket), -EPROTONOSUPPORT (not TCP, or TCP carrying an
 * upper-layer protocol such as kTLS, which reads the stream itself and keeps pointers into
 * its queue), -ENOTCONN (not established).
 */
struct socket *iwarp_shim_sock_adopt(int fd)
{
	int err;
	struct socket *sock = sockfd_lookup(fd, &err);

	if (!sock)
		return ERR_PTR(err);
	if (sock->sk->sk_type != SOCK_STREAM || sock->sk->sk_protocol != IPPROTO_TCP ||
	    (sock->sk->sk_family != AF_INET && sock->sk->sk_family != AF_INET6) ||
	    inet_csk_has_ulp(sock->sk))
		err = -EPROTONOSUPPORT;
	else if (READ_ONCE(sock->sk->sk_state) != TCP_ESTABLISHED)
		err = -ENOTCONN;
	else
		return sock;
	sockfd_put(sock);
	return ERR_PTR(err);
}

/*
 * Gives the socket @sock a file, so iwarp_shim_sock_put() releases it like an adopted
 * one. Returns it, or an ERR_PTR (sock_alloc_file() released the socket then).
 */
static struct socket *with_file(struct socket *sock)
{
	struct file *file = sock_alloc_file(sock, 0, NULL);

	return IS_ERR(file) ? ERR_CAST(file) : sock;
}

/*
 * Starts connecting a new TCP socket of the caller's, in its network namespace, to @to (IPv4 or
 * IPv6), without waiting (iwarp_shim_sock_connected() says how it goes); from @from if not
 * NULL and of @to's family (port 0: any). The socket gets a file, so iwarp_shim_sock_put()
 * releases it like an adopted one. Returns it, or an ERR_PTR.
 */
struct socket *iwarp_shim_sock_connect(const struct iwarp_endpoint *to, const struct iwarp_endpoint *from)
{
	struct sockaddr_storage ss, fs;
	int len = iwarp_sockaddr_from(&ss, to);
	int from_len = from && from->family == to->family ? iwarp_sockaddr_from(&fs, from) : 0;
	struct socket *sock;
	int rc;

	if (!len)
		return ERR_PTR(-EAFNOSUPPORT);
	/*
	 * The caller's own socket, as siw's: security modules and cgroup policy judge it as the
	 * caller's (a kernel socket would pass them all), and it holds its namespace.
	 */
	rc = sock_create(to->family, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (rc)
		return ERR_PTR(rc);
	if (from_len) {
		/* As siw: the port may have been a closed connection's a moment ago. */
		sock_set_reuseaddr(sock->sk);
		rc = kernel_bind(sock, (struct sockaddr_unsized *)&fs, from_len);
		if (rc == -EADDRINUSE) {
			/* rdma_cm's port is its own, not TCP's: a socket of TCP's may hold it. */
			struct iwarp_endpoint any_port = *from;

			any_port.port = 0;
			iwarp_sockaddr_from(&fs, &any_port);
			rc = kernel_bind(sock, (struct sockaddr_unsized *)&fs, from_len);
		}
		if (rc) {
			sock_release(sock);
			return ERR_PTR(rc);
		}
	}
	rc = kernel_connect(sock, (struct sockaddr_unsized *)&ss, len, O_NONBLOCK);
	if (rc && rc != -EINPROGRESS) {
		sock_release(sock);
		return ERR_PTR(rc);
	}
	return with_file(sock);
}

/*
 * How connecting went: 0 once connected (whatever happened after), -EINPROGRESS while it goes
 * on, or why it failed (the socket's error, taken only then, or -ECONNRESET). The state is read
 * first, with acquire: TCP sets the error before it stores TCP_CLOSE.
 */
int iwarp_shim_sock_connected(struct socket *sock)
{
	struct sock *sk = sock->sk;
	int err;

	switch (inet_sk_state_load(sk)) {
	case TCP_SYN_SENT:
	case TCP_SYN_RECV:
		return -EINPROGRESS;
	case TCP_CLOSE:
		err = sock_error(sk);
		return err ? err : -ECONNRESET;
	case TCP_LISTEN:
		/* An adopted socket its application disconnected and made listen. */
		return -ENOTCONN;
	default:
		return 0;
	}
}

/*
 * A TCP socket of the caller's, in its network namespace, listening on @at (IPv4 or IPv6; with
 * @v6only an IPv6 one takes IPv6 connections only, so an IPv4 listener may share its port;
 * @ifindex, unless 0, takes only connections arriving on that netdev; @at's port 0 picks
 * one, reported in *@port), with a file like the connected ones, so iwarp_shim_sock_put()
 * releases it. Returns it, or an ERR_PTR (-EADDRINUSE, ...).
 */
struct socket *iwarp_shim_sock_listen(const struct iwarp_endpoint *at, u16 *port, int backlog, bool v6only, int ifindex)
{
	struct sockaddr_storage ss;
	struct iwarp_endpoint bound;
	int len = iwarp_sockaddr_from(&ss, at);
	struct socket *sock;
	int rc;

	if (!len)
		return ERR_PTR(-EAFNOSUPPORT);
	/* The caller's own socket, as in iwarp_shim_sock_connect(). */
	rc = sock_create(at->family, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (rc)
		return ERR_PTR(rc);
	sock_set_reuseaddr(sock->sk);
	if (at->family == AF_INET6 && v6only)
		rc = ip6_sock_set_v6only(sock->sk);
	if (!rc && ifindex)
		rc = sock_bindtoindex(sock->sk, ifindex, true);
	if (!rc)
		rc = kernel_bind(sock, (struct sockaddr_unsized *)&ss, len);
	if (!rc)
		rc = kernel_listen(sock, backlog);
	if (!rc)
		rc = kernel_getsockname(sock, (struct sockaddr *)&ss) < 0 ? -EINVAL : 0;
	if (rc) {
		sock_release(sock);
		return ERR_PTR(rc);
	}
	iwarp_endpoint_from(&bound, &ss);
	*port = bound.port;
	return with_file(sock);
}

/*
 * The next connection queued on @listener, without waiting (-EAGAIN: none; -EINVAL once the
 * listener is shut down), with a file like the others; its peer's address in *@addr, *@port.
 * Returns it or an ERR_PTR.
 */
struct socket *iwarp_shim_sock_accept(struct socket *listener, struct iwarp_endpoint *peer)
{
	struct sockaddr_storage ss = {};
	struct socket *sock;
	int rc;

	rc = kernel_accept(listener, &sock, O_NONBLOCK);
	if (rc)
		return ERR_PTR(rc);
	if (kernel_getpeername(sock, (struct sockaddr *)&ss) >= 0)
		iwarp_endpoint_from(peer, &ss);
	return with_file(sock);
}

/*
 * Discards what the peer sent that nobody will read: TCP answers a close with unread data by a
 * reset, which would throw away what we still have to send (a Terminate).
 */
static void discard_unread(struct socket *sock)
{
	char sink[256];
	struct kvec iov = { .iov_base = sink, .iov_len = sizeof(sink) };
	struct msghdr msg = {};
	/* About what the receive queue holds: a peer that goes on sending cannot keep us here. */
	unsigned int passes = READ_ONCE(sock->sk->sk_rcvbuf) / sizeof(sink) + 1;

	/* MSG_TRUNC: TCP drops the octets without copying them. */
	while (passes-- && kernel_recvmsg(sock, &msg, &iov, 1, sizeof(sink), MSG_DONTWAIT | MSG_TRUNC) > 0)
		;
}

/*
 * Closes the connection in order (unread data discarded, then FIN after whatever is still
 * queued to send, which TCP goes on delivering after the close) and drops the reference
 * iwarp_shim_sock_adopt() took. Never waits for the peer.
 */
void iwarp_shim_sock_put(struct socket *sock)
{
	discard_unread(sock);
	kernel_sock_shutdown(sock, SHUT_RDWR);
	sockfd_put(sock);
}

/*
 * Sends as much of @len bytes as the send buffer takes now, without waiting. Returns the count,
 * -EAGAIN if it takes nothing (sk_write_space follows when it can), or another negative errno.
 */
int iwarp_shim_sock_send_nowait(struct socket *sock, const void *buf, size_t len)
{
	struct kvec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL | MSG_DONTWAIT };

	return kernel_sendmsg(sock, &msg, &iov, 1, len);
}

/*
 * Receives what is there now, up to @len bytes, without waiting. Returns the count, -EAGAIN if
 * nothing is there, -ECONNRESET once the peer closed, or another negative errno.
 */
int iwarp_shim_sock_recv_nowait(struct socket *sock, void *buf, size_t len)
{
	struct kvec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = {};
	int rc = kernel_recvmsg(sock, &msg, &iov, 1, len, MSG_DONTWAIT);

	return rc == 0 && len ? -ECONNRESET : rc;
}

/*
 * Queues as much of the @n page fragments of @bv as the socket buffer takes now, by reference
 * (MSG_SPLICE_PAGES: TCP takes its own page references and copies nothing). The fragments are
 * @nrec records of @records[i] bytes each; with @eor each record ends its skb (MSG_EOR), so the
 * next starts a new one and, when a record fits the MSS, a TCP segment of its own. One socket
 * lock covers all records. With @more, the caller sends more at once: TCP holds the last
 * record's partial segment too (MSG_MORE), so that it goes out with what follows. Reports the
 * sequence number just past what TCP has in *@end_seq. Returns the bytes taken (if any) or a
 * negative errno.
 */
long iwarp_shim_sock_send_pages(struct socket *sock, struct bio_vec *bv, size_t n, const u32 *records, size_t nrec,
				bool eor, bool more, u32 *end_seq)
{
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL | MSG_SPLICE_PAGES | MSG_DONTWAIT };
	struct sock *sk = sock->sk;
	size_t total = 0, i;
	long taken = 0;
	int err = 0;

	for (i = 0; i < nrec; i++)
		total += records[i];
	iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, bv, n, total);
	lock_sock(sk);
	for (i = 0; i < nrec; i++) {
		size_t after = msg_data_left(&msg) - records[i];

		/* Cork all but the last record: TCP sends them as the next one follows. */
		msg.msg_flags &= ~(MSG_EOR | MSG_MORE);
		msg.msg_flags |= (eor ? MSG_EOR : 0) | (i + 1 < nrec || more ? MSG_MORE : 0);
		iov_iter_truncate(&msg.msg_iter, records[i]);
		while (msg_data_left(&msg)) {
			int rc = tcp_sendmsg_locked(sk, &msg, msg_data_left(&msg));

			if (rc <= 0) {
				err = rc ? rc : -EPIPE;
				goto out;
			}
			taken += rc;
		}
		iov_iter_reexpand(&msg.msg_iter, after);
	}
out:
	*end_seq = READ_ONCE(tcp_sk(sk)->write_seq);
	release_sock(sk);
	/* What TCP took is reported even if it then failed: it goes out, and the error comes again. */
	if (err && err != -EAGAIN && !taken)
		return err;
	return taken;
}

/* Sends what is written at once (an RNIC does not wait to fill a segment; siw does the same). */
void iwarp_shim_sock_nodelay(struct socket *sock)
{
	tcp_sock_set_nodelay(sock->sk);
}

/* The oldest sequence number the peer has not acknowledged. */
u32 iwarp_shim_sock_snd_una(struct socket *sock)
{
	return READ_ONCE(tcp_sk(sock->sk)->snd_una);
}

/* The connection's current MSS (what an FPDU must fit, RFC 5044 section 11.2). */
u32 iwarp_shim_sock_mss(struct socket *sock)
{
	return READ_ONCE(tcp_sk(sock->sk)->mss_cache);
}

/*
 * Has TCP call sk_write_space on the next acknowledgement (it does while SOCK_NOSPACE is set).
 * The barrier pairs with the one in tcp_check_space(): a caller that reads snd_una after this
 * misses no acknowledgement.
 */
void iwarp_shim_sock_want_write_space(struct socket *sock)
{
	set_bit(SOCK_NOSPACE, &sock->flags);
	smp_mb__after_atomic();
}

/* Shuts the connection down both ways (@send_only: our sending only); the reference stays. */
void iwarp_shim_sock_shutdown(struct socket *sock, bool send_only)
{
	kernel_sock_shutdown(sock, send_only ? SHUT_WR : SHUT_RDWR);
}

/* The connection is still established (no FIN, reset or close seen). */
bool iwarp_shim_sock_established(struct socket *sock)
{
	return READ_ONCE(sock->sk->sk_state) == TCP_ESTABLISHED;
}

int iwarp_sockaddr_from(struct sockaddr_storage *ss, const struct iwarp_endpoint *ep)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (ep->family == AF_INET) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(ep->port);
		memcpy(&sin->sin_addr, ep->addr, sizeof(sin->sin_addr));
		return sizeof(*sin);
	}
	if (ep->family == AF_INET6) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(ep->port);
		memcpy(&sin6->sin6_addr, ep->addr, sizeof(sin6->sin6_addr));
		sin6->sin6_scope_id = ep->scope_id;
		return sizeof(*sin6);
	}
	return 0;
}

void iwarp_endpoint_from(struct iwarp_endpoint *ep, const struct sockaddr_storage *ss)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;

	memset(ep, 0, sizeof(*ep));
	if (ss->ss_family == AF_INET) {
		ep->port = ntohs(sin->sin_port);
		memcpy(ep->addr, &sin->sin_addr, sizeof(sin->sin_addr));
	} else if (ss->ss_family == AF_INET6) {
		ep->port = ntohs(sin6->sin6_port);
		memcpy(ep->addr, &sin6->sin6_addr, sizeof(sin6->sin6_addr));
		ep->scope_id = sin6->sin6_scope_id;
	} else {
		return;
	}
	ep->family = ss->ss_family;
}

/* Our end and the peer's end of @sock's connection (family 0 where the kernel has none). */
void iwarp_shim_sock_endpoints(struct socket *sock, struct iwarp_endpoint *local, struct iwarp_endpoint *remote)
{
	struct sockaddr_storage ss = {};

	if (kernel_getsockname(sock, (struct sockaddr *)&ss) < 0)
		ss.ss_family = AF_UNSPEC;
	iwarp_endpoint_from(local, &ss);
	memset(&ss, 0, sizeof(ss));
	if (kernel_getpeername(sock, (struct sockaddr *)&ss) < 0)
		ss.ss_family = AF_UNSPEC;
	iwarp_endpoint_from(remote, &ss);
}
