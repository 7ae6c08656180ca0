// SPDX-License-Identifier: GPL-2.0
/*
 * C shim for kernel APIs that the Rust kernel crate does not wrap and that are static inlines
 * or macros (tcp_sk(), crc32c()). Rust reaches these through src/shim.rs, which wraps each one
 * safely. Keep every function here small and free of policy.
 */
#include <linux/bvec.h>
#include <linux/crc32.h>
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

/*
 * Gives the kernel socket @sock a file, so iwarp_shim_sock_put() releases it like an adopted
 * one. Returns it, or NULL with *@err (sock_alloc_file() released the socket then).
 */
static struct socket *with_file(struct socket *sock, int *err)
{
	struct file *file = sock_alloc_file(sock, 0, NULL);

	if (IS_ERR(file)) {
		*err = PTR_ERR(file);
		return NULL;
	}
	*err = 0;
	return sock;
}

/*
 * Connects a new kernel TCP socket, in the caller's network namespace, to @addr:@port (host
 * order), waiting at most @timeout_ms. The socket gets a file, so iwarp_shim_sock_put() releases
 * it like an adopted one. Returns it, or NULL with *@err.
 */
struct socket *iwarp_shim_sock_connect(u32 addr, u16 port, unsigned int timeout_ms, int *err)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_addr.s_addr = htonl(addr),
		.sin_port = htons(port),
	};
	struct socket *sock;
	int rc;

	rc = sock_create_kern(current->nsproxy->net_ns, AF_INET, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (rc) {
		*err = rc;
		return NULL;
	}
	WRITE_ONCE(sock->sk->sk_sndtimeo, msecs_to_jiffies(timeout_ms));
	rc = kernel_connect(sock, (struct sockaddr_unsized *)&sin, sizeof(sin), 0);
	if (rc) {
		sock_release(sock);
		*err = rc == -EINPROGRESS ? -ETIMEDOUT : rc;
		return NULL;
	}
	WRITE_ONCE(sock->sk->sk_sndtimeo, MAX_SCHEDULE_TIMEOUT);
	return with_file(sock, err);
}

/*
 * A kernel TCP socket in the caller's network namespace listening on @addr:*@port (host order;
 * port 0 picks one, reported back in *@port), with a file like the connected ones, so
 * iwarp_shim_sock_put() releases it. Returns it, or NULL with *@err (-EADDRINUSE, ...).
 */
struct socket *iwarp_shim_sock_listen(u32 addr, u16 *port, int backlog, int *err)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_addr.s_addr = htonl(addr),
		.sin_port = htons(*port),
	};
	struct socket *sock;
	int rc;

	rc = sock_create_kern(current->nsproxy->net_ns, AF_INET, SOCK_STREAM, IPPROTO_TCP, &sock);
	if (rc) {
		*err = rc;
		return NULL;
	}
	sock_set_reuseaddr(sock->sk);
	rc = kernel_bind(sock, (struct sockaddr_unsized *)&sin, sizeof(sin));
	if (!rc)
		rc = kernel_listen(sock, backlog);
	if (!rc)
		rc = kernel_getsockname(sock, (struct sockaddr *)&sin) < 0 ? -EINVAL : 0;
	if (rc) {
		sock_release(sock);
		*err = rc;
		return NULL;
	}
	*port = ntohs(sin.sin_port);
	return with_file(sock, err);
}

/*
 * The next connection on @listener, waiting at most @timeout_ms (-ETIMEDOUT; -EINVAL once the
 * listener is shut down), with a file like the others; its peer's address in *@addr, *@port.
 */
struct socket *iwarp_shim_sock_accept(struct socket *listener, unsigned int timeout_ms, u32 *addr, u16 *port, int *err)
{
	struct sockaddr_in sin = {};
	struct socket *sock;
	int rc;

	WRITE_ONCE(listener->sk->sk_rcvtimeo, msecs_to_jiffies(timeout_ms));
	rc = kernel_accept(listener, &sock, 0);
	if (rc) {
		*err = rc == -EAGAIN ? -ETIMEDOUT : rc;
		return NULL;
	}
	if (kernel_getpeername(sock, (struct sockaddr *)&sin) >= 0) {
		*addr = ntohl(sin.sin_addr.s_addr);
		*port = ntohs(sin.sin_port);
	}
	return with_file(sock, err);
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

/* The Rust side hands page fragments over as bio_vecs (src/frags.rs mirrors the layout). */
static_assert(sizeof(struct bio_vec) == 16);
static_assert(offsetof(struct bio_vec, bv_len) == 8 && offsetof(struct bio_vec, bv_offset) == 12);

static void iwarp_hook_set_blocked(struct sock *sk, bool blocked);

/*
 * Queues as much of the @n page fragments of @bv (@len bytes in all) as the socket buffer takes
 * now, by reference (MSG_SPLICE_PAGES: TCP takes its own page references and copies nothing).
 * When it cannot take all, the hook's transmit work runs once TCP frees buffer. Reports the
 * sequence number just past what TCP has in *@end_seq. Returns the bytes taken or a negative
 * errno.
 */
long iwarp_shim_sock_send_pages(struct socket *sock, struct bio_vec *bv, size_t n, size_t len, u32 *end_seq)
{
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL | MSG_SPLICE_PAGES | MSG_DONTWAIT };
	long taken = 0;

	/* Set first: a write_space between a refusal and our return must not be missed. */
	iwarp_hook_set_blocked(sock->sk, true);
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
	if (!msg_data_left(&msg))
		iwarp_hook_set_blocked(sock->sk, false);
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
 * @run(@owner) in process context (receiving); iwarp_shim_sock_kick_tx() and write_space (send
 * buffer freed by an acknowledgement) queue @tx_work, which calls @run_tx(@owner) (sending what
 * receiving asked for, so receiving never waits on a full send buffer; completing what TCP
 * acknowledged). Installed under sk_callback_lock; removal restores the old callbacks under the
 * same lock and then waits for both works, so @owner is never used after
 * iwarp_shim_hook_remove() returns.
 */
struct iwarp_hook {
	struct sock *sk;
	void *owner;
	void (*run)(void *owner);
	void (*run_tx)(void *owner);
	struct work_struct work;
	struct work_struct tx_work;
	void (*old_data_ready)(struct sock *sk);
	void (*old_state_change)(struct sock *sk);
	void (*old_write_space)(struct sock *sk);
	/* Queue the transmit work once snd_una reaches ack_goal (while ack_watch is set). */
	u32 ack_goal;
	bool ack_watch;
	/* The socket refused part of a send: queue the transmit work once it can take more. */
	bool tx_blocked;
};

static void iwarp_hook_set_blocked(struct sock *sk, bool blocked)
{
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = sk->sk_user_data;
	if (h && h->sk == sk)
		WRITE_ONCE(h->tx_blocked, blocked);
	read_unlock_bh(&sk->sk_callback_lock);
}

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

/*
 * Has the hook's transmit work run once the peer has acknowledged everything before sequence
 * number @goal. TCP calls sk_write_space on acknowledgements while SOCK_NOSPACE is set; the
 * barrier pairs with the one in tcp_check_space(), so a caller that reads snd_una after this
 * misses no acknowledgement.
 */
void iwarp_shim_sock_watch_acks(struct socket *sock, u32 goal)
{
	struct sock *sk = sock->sk;
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = sk->sk_user_data;
	if (h && h->sk == sk) {
		WRITE_ONCE(h->ack_goal, goal);
		WRITE_ONCE(h->ack_watch, true);
	}
	read_unlock_bh(&sk->sk_callback_lock);
	set_bit(SOCK_NOSPACE, &sock->flags);
	smp_mb__after_atomic();
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
 * a blocked sender). Wakes blocked senders; queues the transmit work when a refused send can go
 * on or the watched acknowledgement arrived, else keeps SOCK_NOSPACE set so TCP calls again on
 * the next one.
 */
static void iwarp_hook_write_space(struct sock *sk)
{
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = sk->sk_user_data;
	if (h) {
		h->old_write_space(sk);
		if (READ_ONCE(h->tx_blocked) && sk_stream_is_writeable(sk)) {
			WRITE_ONCE(h->tx_blocked, false);
			queue_work(system_highpri_wq, &h->tx_work);
		}
		if (READ_ONCE(h->ack_watch)) {
			if (!before(READ_ONCE(tcp_sk(sk)->snd_una), READ_ONCE(h->ack_goal))) {
				WRITE_ONCE(h->ack_watch, false);
				queue_work(system_highpri_wq, &h->tx_work);
			} else if (sk->sk_socket) {
				set_bit(SOCK_NOSPACE, &sk->sk_socket->flags);
			}
		}
	} else if (sk->sk_write_space != iwarp_hook_write_space) {
		/* Unhooked since this call began: the restored callback still has to wake. */
		sk->sk_write_space(sk);
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

/* Hooks @sock; returns the hook or NULL with *@err (-EBUSY: the socket has a user already). */
struct iwarp_hook *iwarp_shim_hook_install(struct socket *sock, void *owner, void (*run)(void *), void (*run_tx)(void *), int *err)
{
	struct sock *sk = sock->sk;
	struct iwarp_hook *h = kzalloc(sizeof(*h), GFP_KERNEL);

	if (!h) {
		*err = -ENOMEM;
		return NULL;
	}
	h->sk = sk;
	h->owner = owner;
	h->run = run;
	h->run_tx = run_tx;
	INIT_WORK(&h->work, iwarp_hook_work);
	INIT_WORK(&h->tx_work, iwarp_hook_tx_work);
	write_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_user_data) {
		write_unlock_bh(&sk->sk_callback_lock);
		kfree(h);
		*err = -EBUSY;
		return NULL;
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
	*err = 0;
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
 * Receiving: tcp_read_sock() offers the queued stream from copied_seq on, skb by skb. At the
 * first skb the actor gathers pointers to every queued byte (linear parts and page fragments of
 * this and the following skbs, no copy) into the caller's kvecs and hands them to @fn, which
 * returns how many stream octets it consumed (or a negative value to stop); the actor then
 * consumes that many, across as many skbs as it takes. What @fn leaves stays queued for the
 * next call, with more data.
 */
#ifdef CONFIG_HIGHMEM
#error "the receive gather keeps page fragment addresses; it needs every page mapped (no HIGHMEM)"
#endif

/* src/socket.rs hands its array of these over. */
static_assert(sizeof(struct kvec) == 16);
static_assert(offsetof(struct kvec, iov_base) == 0 && offsetof(struct kvec, iov_len) == 8);

typedef long (*iwarp_rx_fn)(void *ctx, const struct kvec *parts, size_t n, bool capped);

struct iwarp_read_state {
	struct sock *sk;
	void *ctx;
	iwarp_rx_fn fn;
	size_t skip;
	bool stop;
	struct kvec *parts;
	size_t cap;
	size_t n;
};

static bool gather_add(struct iwarp_read_state *st, const void *p, size_t len)
{
	if (!len)
		return true;
	if (st->n == st->cap)
		return false;
	st->parts[st->n].iov_base = (void *)p;
	st->parts[st->n].iov_len = len;
	st->n++;
	return true;
}

/* Adds skb's bytes from @off on; false when the gather array is full. */
static bool gather_skb(struct iwarp_read_state *st, const struct sk_buff *skb, u32 off)
{
	const struct sk_buff *frag_skb;
	u32 head = skb_headlen(skb);
	int i;

	if (off < head) {
		if (!gather_add(st, skb->data + off, head - off))
			return false;
		off = 0;
	} else {
		off -= head;
	}
	if (!skb_frags_readable(skb))
		return false;
	for (i = 0; i < skb_shinfo(skb)->nr_frags; i++) {
		const skb_frag_t *f = &skb_shinfo(skb)->frags[i];
		u32 size = skb_frag_size(f);

		if (off < size) {
			if (!gather_add(st, skb_frag_address(f) + off, size - off))
				return false;
			off = 0;
		} else {
			off -= size;
		}
	}
	skb_walk_frags(skb, frag_skb) {
		if (off < frag_skb->len) {
			if (!gather_skb(st, frag_skb, off))
				return false;
			off = 0;
		} else {
			off -= frag_skb->len;
		}
	}
	return true;
}

static int iwarp_read_actor(read_descriptor_t *desc, struct sk_buff *skb, unsigned int offset, size_t len)
{
	struct iwarp_read_state *st = desc->arg.data;
	bool capped = false;
	size_t used;
	long rc;

	if (!st->skip) {
		struct sk_buff *next = skb;
		u32 off = offset;
		/* Sequence number just past the bytes gathered so far. */
		u32 end = TCP_SKB_CB(skb)->seq + offset;

		if (st->stop)
			return 0;
		st->n = 0;
		for (;;) {
			if (!gather_skb(st, next, off)) {
				capped = true;
				break;
			}
			if (after(TCP_SKB_CB(next)->seq + next->len, end))
				end = TCP_SKB_CB(next)->seq + next->len;
			if (skb_queue_is_last(&st->sk->sk_receive_queue, next))
				break;
			next = skb_queue_next(&st->sk->sk_receive_queue, next);
			/*
			 * Queued skbs may overlap: TCP queues a segment that starts below rcv_nxt
			 * (a retransmission or duplicate that also carries new bytes) whole, as
			 * tcp_read_sock() knows. Go on from the first byte not gathered yet.
			 */
			if (after(TCP_SKB_CB(next)->seq, end))
				break;
			off = end - TCP_SKB_CB(next)->seq;
		}
		rc = st->fn(st->ctx, st->parts, st->n, capped);
		if (rc <= 0) {
			st->stop = true;
			return 0;
		}
		st->skip = rc;
		/* Everything queued was offered: once it is consumed, wait for more. */
		st->stop = !capped;
	}
	used = min(st->skip, len);
	st->skip -= used;
	return used;
}

/*
 * Offers the queued stream to @fn as described above, gathering into the @cap kvecs at @parts,
 * under the socket lock (process context). Returns the octets consumed or a negative errno.
 */
int iwarp_shim_sock_read(struct socket *sock, void *ctx, iwarp_rx_fn fn, struct kvec *parts, size_t cap)
{
	struct iwarp_read_state st = {
		.sk = sock->sk, .ctx = ctx, .fn = fn, .parts = parts, .cap = cap,
	};
	read_descriptor_t desc = { .count = 1, .arg.data = &st };
	int rc;

	lock_sock(sock->sk);
	rc = tcp_read_sock(sock->sk, &desc, iwarp_read_actor);
	release_sock(sock->sk);
	return rc;
}
