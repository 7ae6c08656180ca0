// SPDX-License-Identifier: GPL-2.0
/*
 * Receiving from a kernel TCP socket (src/socket/gather.rs): the socket lock, tcp_read_sock(),
 * TCP's out-of-order queue and the skb fields the gather reads. The receive queue and the
 * out-of-order queue change only under the socket lock, which every caller holds.
 */
#include <linux/skbuff.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "shim.h"

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

/* Takes the socket lock (process context; may sleep). */
void iwarp_shim_sock_lock(struct socket *sock)
{
	lock_sock(sock->sk);
}

/* Releases it (TCP then processes what arrived meanwhile, its backlog). */
void iwarp_shim_sock_release(struct socket *sock)
{
	release_sock(sock->sk);
}

/*
 * tcp_read_sock() offers the queued stream from copied_seq on, skb by skb, to @actor(@ctx, skb,
 * offset, len), which returns how many of those octets it consumed (0 stops). Socket lock held.
 * -EPROTO once the peer sent urgent data, which MPA never does: tcp_read_sock() would stop at
 * the urgent octet for good (only a recvmsg() moves past it), in the middle of octets the actor
 * was offered and consumed.
 */
int iwarp_shim_sock_read(struct socket *sock, void *ctx,
			 int (*actor)(void *ctx, struct sk_buff *skb, u32 offset, size_t len))
{
	struct iwarp_reader r = { .ctx = ctx, .actor = actor };
	read_descriptor_t desc = { .count = 1, .arg.data = &r };

	if (READ_ONCE(tcp_sk(sock->sk)->urg_data))
		return -EPROTO;
	return tcp_read_sock(sock->sk, &desc, iwarp_read_actor);
}

/* The sequence number of the first octet not read yet (socket lock held). */
u32 iwarp_shim_sock_copied_seq(struct socket *sock)
{
	return tcp_sk(sock->sk)->copied_seq;
}

/* Packets TCP has queued out of order so far (grows with each one; exact under the lock). */
u32 iwarp_shim_sock_ooo_packets(struct socket *sock)
{
	return READ_ONCE(tcp_sk(sock->sk)->rcv_ooopack);
}

/* In-order octets TCP holds that nobody has read yet (a hint outside the socket lock). */
u32 iwarp_shim_sock_unread(struct socket *sock)
{
	const struct tcp_sock *tp = tcp_sk(sock->sk);

	return READ_ONCE(tp->rcv_nxt) - READ_ONCE(tp->copied_seq);
}

/* The lowest skb of the out-of-order queue, or NULL (socket lock held). */
struct sk_buff *iwarp_shim_ooo_first(struct socket *sock)
{
	return skb_rb_first(&tcp_sk(sock->sk)->out_of_order_queue);
}

/* The next skb of the out-of-order queue, or NULL (socket lock held). */
struct sk_buff *iwarp_shim_ooo_next(struct sk_buff *skb)
{
	return skb_rb_next(skb);
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
