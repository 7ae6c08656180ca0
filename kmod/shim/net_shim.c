// SPDX-License-Identifier: GPL-2.0
/*
 * C shim for kernel APIs that the Rust kernel crate does not wrap and that are static inlines
 * or macros (tcp_sk(), crc32c()). Rust reaches these through src/shim.rs, which wraps each one
 * safely. Keep every function here small and free of policy.
 */
#include <linux/bvec.h>
#include <linux/crc32.h>
#include <linux/err.h>
#include <linux/file.h>
#include <linux/jiffies.h>
#include <linux/in.h>
#include <linux/net.h>
#include <linux/nsproxy.h>
#include <linux/skbuff.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
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
 * ERR_PTR: -EBADF/-ENOTSOCK (not a socket), -EPROTONOSUPPORT (not TCP), -ENOTCONN (not
 * established).
 */
struct socket *iwarp_shim_sock_adopt(int fd)
{
	int err;
	struct socket *sock = sockfd_lookup(fd, &err);

	if (!sock)
		return ERR_PTR(err);
	if (sock->sk->sk_type != SOCK_STREAM || sock->sk->sk_protocol != IPPROTO_TCP ||
	    (sock->sk->sk_family != AF_INET && sock->sk->sk_family != AF_INET6))
		err = -EPROTONOSUPPORT;
	else if (READ_ONCE(sock->sk->sk_state) != TCP_ESTABLISHED)
		err = -ENOTCONN;
	else
		return sock;
	sockfd_put(sock);
	return ERR_PTR(err);
}

/*
 * Gives the kernel socket @sock a file, so iwarp_shim_sock_put() releases it like an adopted
 * one. Returns it, or an ERR_PTR (sock_alloc_file() released the socket then).
 */
static struct socket *with_file(struct socket *sock)
{
	struct file *file = sock_alloc_file(sock, 0, NULL);

	return IS_ERR(file) ? ERR_CAST(file) : sock;
}

/*
 * Connects a new kernel TCP socket, in the caller's network namespace, to @addr:@port (host
 * order), waiting at most @timeout_ms. The socket gets a file, so iwarp_shim_sock_put() releases
 * it like an adopted one. Returns it, or an ERR_PTR.
 */
struct socket *iwarp_shim_sock_connect(u32 addr, u16 port, unsigned int timeout_ms)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_addr.s_addr = htonl(addr),
		.sin_port = htons(port),
	};
	struct socket *sock;
	int rc;

	rc = sock_create_kern(current->nsproxy->net_ns, AF_INET, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (rc)
		return ERR_PTR(rc);
	WRITE_ONCE(sock->sk->sk_sndtimeo, msecs_to_jiffies(timeout_ms));
	rc = kernel_connect(sock, (struct sockaddr_unsized *)&sin, sizeof(sin), 0);
	if (rc) {
		sock_release(sock);
		return ERR_PTR(rc == -EINPROGRESS ? -ETIMEDOUT : rc);
	}
	WRITE_ONCE(sock->sk->sk_sndtimeo, MAX_SCHEDULE_TIMEOUT);
	return with_file(sock);
}

/*
 * A kernel TCP socket in the caller's network namespace listening on @addr:*@port (host order;
 * port 0 picks one, reported back in *@port), with a file like the connected ones, so
 * iwarp_shim_sock_put() releases it. Returns it, or an ERR_PTR (-EADDRINUSE, ...).
 */
struct socket *iwarp_shim_sock_listen(u32 addr, u16 *port, int backlog)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_addr.s_addr = htonl(addr),
		.sin_port = htons(*port),
	};
	struct socket *sock;
	int rc;

	rc = sock_create_kern(current->nsproxy->net_ns, AF_INET, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (rc)
		return ERR_PTR(rc);
	sock_set_reuseaddr(sock->sk);
	rc = kernel_bind(sock, (struct sockaddr_unsized *)&sin, sizeof(sin));
	if (!rc)
		rc = kernel_listen(sock, backlog);
	if (!rc)
		rc = kernel_getsockname(sock, (struct sockaddr *)&sin) < 0 ? -EINVAL : 0;
	if (rc) {
		sock_release(sock);
		return ERR_PTR(rc);
	}
	*port = ntohs(sin.sin_port);
	return with_file(sock);
}

/*
 * The next connection on @listener, waiting at most @timeout_ms (-ETIMEDOUT; -EINVAL once the
 * listener is shut down), with a file like the others; its peer's address in *@addr, *@port.
 * Returns it or an ERR_PTR.
 */
struct socket *iwarp_shim_sock_accept(struct socket *listener, unsigned int timeout_ms, u32 *addr, u16 *port)
{
	struct sockaddr_in sin = {};
	struct socket *sock;
	int rc;

	WRITE_ONCE(listener->sk->sk_rcvtimeo, msecs_to_jiffies(timeout_ms));
	rc = kernel_accept(listener, &sock, 0);
	if (rc)
		return ERR_PTR(rc == -EAGAIN ? -ETIMEDOUT : rc);
	if (kernel_getpeername(sock, (struct sockaddr *)&sin) >= 0) {
		*addr = ntohl(sin.sin_addr.s_addr);
		*port = ntohs(sin.sin_port);
	}
	return with_file(sock);
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

/*
 * Queues as much of the @n page fragments of @bv (@len bytes in all) as the socket buffer takes
 * now, by reference (MSG_SPLICE_PAGES: TCP takes its own page references and copies nothing).
 * Reports the sequence number just past what TCP has in *@end_seq. Returns the bytes taken or a
 * negative errno.
 */
long iwarp_shim_sock_send_pages(struct socket *sock, struct bio_vec *bv, size_t n, size_t len, u32 *end_seq)
{
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL | MSG_SPLICE_PAGES | MSG_DONTWAIT };
	long taken = 0;

	iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, bv, n, len);
	while (msg_data_left(&msg)) {
		int rc = sock_sendmsg(sock, &msg);

		if (rc == -EAGAIN)
			break;
		if (rc < 0)
			return rc;
		if (rc == 0)
			return -EPIPE;
		taken += rc;
	}
	*end_seq = READ_ONCE(tcp_sk(sock->sk)->write_seq);
	return taken;
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

/* Shuts the connection down both ways; the reference stays. */
void iwarp_shim_sock_shutdown(struct socket *sock)
{
	kernel_sock_shutdown(sock, SHUT_RDWR);
}

/* The connection is still established (no FIN, reset or close seen). */
bool iwarp_shim_sock_established(struct socket *sock)
{
	return READ_ONCE(sock->sk->sk_state) == TCP_ESTABLISHED;
}

/*
 * The hook of a QP: the socket's data_ready and state_change callbacks queue @work, which calls
 * @run(@owner) in process context (receiving); iwarp_shim_sock_kick_tx() queues @tx_work, which
 * calls @run_tx(@owner) (sending what receiving asked for, so receiving never waits on a full
 * send buffer). On write_space (send buffer freed by an acknowledgement) @space(@watch, ...)
 * decides, in Rust (src/socket.rs), whether the transmit work runs. Installed under
 * sk_callback_lock; removal restores the old callbacks under the same lock and then waits for
 * both works, so neither @owner nor @watch is used after iwarp_shim_hook_remove() returns.
 */
struct iwarp_hook {
	struct sock *sk;
	void *owner;
	void (*run)(void *owner);
	void (*run_tx)(void *owner);
	const void *watch;
	unsigned int (*space)(const void *watch, u32 snd_una, bool writeable);
	struct work_struct work;
	struct work_struct tx_work;
	void (*old_data_ready)(struct sock *sk);
	void (*old_state_change)(struct sock *sk);
	void (*old_write_space)(struct sock *sk);
};

static void iwarp_hook_work(struct work_struct *work)
{
	struct iwarp_hook *h = container_of(work, struct iwarp_hook, work);

	h->run(h->owner);
}

static void iwarp_hook_tx_work(struct work_struct *work)
{
	struct iwarp_hook *h = container_of(work, struct iwarp_hook, tx_work);

	h->run_tx(h->owner);
}

/* Queues the transmit work of the hook on @sock, if it is hooked. */
void iwarp_shim_sock_kick_tx(struct socket *sock)
{
	struct sock *sk = sock->sk;
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = sk->sk_user_data;
	if (h && h->sk == sk)
		queue_work(system_highpri_wq, &h->tx_work);
	read_unlock_bh(&sk->sk_callback_lock);
}

/* Runs in softirq context with the socket spinlock held: only queue the work. */
static void iwarp_hook_wake(struct sock *sk)
{
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = sk->sk_user_data;
	if (h)
		queue_work(system_highpri_wq, &h->work);
	read_unlock_bh(&sk->sk_callback_lock);
}

/*
 * Softirq context, socket spinlock held: send buffer was freed (an acknowledgement, or space for
 * a blocked sender). Wakes blocked senders, then does what the Rust side decides.
 */
static void iwarp_hook_write_space(struct sock *sk)
{
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = sk->sk_user_data;
	if (h) {
		h->old_write_space(sk);
		unsigned int what = h->space(h->watch, READ_ONCE(tcp_sk(sk)->snd_una), sk_stream_is_writeable(sk));

		if (what & IWARP_SPACE_TRANSMIT)
			queue_work(system_highpri_wq, &h->tx_work);
		if ((what & IWARP_SPACE_WATCH) && sk->sk_socket)
			set_bit(SOCK_NOSPACE, &sk->sk_socket->flags);
	} else if (sk->sk_write_space != iwarp_hook_write_space) {
		/* Unhooked since this call began: the restored callback still has to wake. */
		sk->sk_write_space(sk);
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

/* Hooks @sock; returns the hook or an ERR_PTR (-EBUSY: the socket has a user already). */
struct iwarp_hook *iwarp_shim_hook_install(struct socket *sock, void *owner, void (*run)(void *owner),
					   void (*run_tx)(void *owner), const void *watch,
					   unsigned int (*space)(const void *watch, u32 snd_una, bool writeable))
{
	struct sock *sk = sock->sk;
	struct iwarp_hook *h = kzalloc(sizeof(*h), GFP_KERNEL);

	if (!h)
		return ERR_PTR(-ENOMEM);
	h->sk = sk;
	h->owner = owner;
	h->run = run;
	h->run_tx = run_tx;
	h->watch = watch;
	h->space = space;
	INIT_WORK(&h->work, iwarp_hook_work);
	INIT_WORK(&h->tx_work, iwarp_hook_tx_work);
	write_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_user_data) {
		write_unlock_bh(&sk->sk_callback_lock);
		kfree(h);
		return ERR_PTR(-EBUSY);
	}
	h->old_data_ready = sk->sk_data_ready;
	h->old_state_change = sk->sk_state_change;
	h->old_write_space = sk->sk_write_space;
	sk->sk_user_data = h;
	sk->sk_data_ready = iwarp_hook_wake;
	sk->sk_state_change = iwarp_hook_wake;
	sk->sk_write_space = iwarp_hook_write_space;
	write_unlock_bh(&sk->sk_callback_lock);
	/* Whatever arrived, or could not be sent, before the hook was in place. */
	queue_work(system_highpri_wq, &h->work);
	queue_work(system_highpri_wq, &h->tx_work);
	return h;
}

/* Restores the socket's callbacks, waits for a running or queued work to finish, frees @h. */
void iwarp_shim_hook_remove(struct iwarp_hook *h)
{
	struct sock *sk = h->sk;

	write_lock_bh(&sk->sk_callback_lock);
	sk->sk_user_data = NULL;
	sk->sk_data_ready = h->old_data_ready;
	sk->sk_state_change = h->old_state_change;
	sk->sk_write_space = h->old_write_space;
	write_unlock_bh(&sk->sk_callback_lock);
	/* Nothing can queue either work now (kicks look the hook up under the lock). */
	cancel_work_sync(&h->work);
	cancel_work_sync(&h->tx_work);
	kfree(h);
}

/*
 * Receiving: tcp_read_sock() offers the queued stream from copied_seq on, skb by skb, to
 * @actor(@ctx, skb, offset, len), which returns how many of those octets it consumed (0 stops).
 * The actor (src/socket/gather.rs) reads the skbs through the accessors below.
 */
#ifdef CONFIG_HIGHMEM
#error "the receive gather keeps page fragment addresses; it needs every page mapped (no HIGHMEM)"
#endif

struct iwarp_reader {
	void *ctx;
	int (*actor)(void *ctx, struct sk_buff *skb, u32 offset, size_t len);
};

static int iwarp_read_actor(read_descriptor_t *desc, struct sk_buff *skb, unsigned int offset, size_t len)
{
	struct iwarp_reader *r = desc->arg.data;

	return r->actor(r->ctx, skb, offset, len);
}

/* Runs tcp_read_sock() with @actor under the socket lock (process context). */
int iwarp_shim_sock_read(struct socket *sock, void *ctx,
			 int (*actor)(void *ctx, struct sk_buff *skb, u32 offset, size_t len))
{
	struct iwarp_reader r = { .ctx = ctx, .actor = actor };
	read_descriptor_t desc = { .count = 1, .arg.data = &r };
	int rc;

	lock_sock(sock->sk);
	rc = tcp_read_sock(sock->sk, &desc, iwarp_read_actor);
	release_sock(sock->sk);
	return rc;
}

/* The skb after @skb in @sock's receive queue, or NULL (socket lock held). */
struct sk_buff *iwarp_shim_rx_next(struct socket *sock, struct sk_buff *skb)
{
	struct sk_buff_head *q = &sock->sk->sk_receive_queue;

	return skb_queue_is_last(q, skb) ? NULL : skb_queue_next(q, skb);
}

/* The TCP sequence number of the skb's first octet. */
u32 iwarp_shim_skb_seq(const struct sk_buff *skb)
{
	return TCP_SKB_CB(skb)->seq;
}

/* Octets in the skb, with its page fragments and frag list. */
u32 iwarp_shim_skb_len(const struct sk_buff *skb)
{
	return skb->len;
}

/* The skb's linear part, @len octets. */
const u8 *iwarp_shim_skb_head(const struct sk_buff *skb, u32 *len)
{
	*len = skb_headlen(skb);
	return skb->data;
}

/* How many page fragments the skb has, or -1 when they cannot be read (device memory). */
int iwarp_shim_skb_nr_frags(const struct sk_buff *skb)
{
	return skb_frags_readable(skb) ? skb_shinfo(skb)->nr_frags : -1;
}

/* Page fragment @i (below iwarp_shim_skb_nr_frags()), @len octets at its kernel address. */
const u8 *iwarp_shim_skb_frag(const struct sk_buff *skb, int i, u32 *len)
{
	const skb_frag_t *f = &skb_shinfo(skb)->frags[i];

	*len = skb_frag_size(f);
	return skb_frag_address(f);
}

/* The first skb of the skb's frag list, or NULL. */
struct sk_buff *iwarp_shim_skb_frag_list(const struct sk_buff *skb)
{
	return skb_shinfo(skb)->frag_list;
}

/* The next skb in a frag list, or NULL. */
struct sk_buff *iwarp_shim_skb_next(const struct sk_buff *skb)
{
	return skb->next;
}
