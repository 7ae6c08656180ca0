// SPDX-License-Identifier: GPL-2.0
/*
 * The hook of a QP's socket (src/socket/hook.rs): the socket's callbacks replaced by ones that
 * queue the QP's work, and the out-of-order doorbell, a netfilter hook that queues the same work
 * when a segment of a hooked connection arrives above rcv_nxt (TCP calls nothing when it queues
 * such a segment; docs/ooo-placement.md). Mechanism only: what runs and when to transmit is
 * decided in Rust.
 */
#include <linux/err.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/hashtable.h>
#include <linux/list.h>
#include <linux/netfilter.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6.h>
#include <linux/rculist.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/tcp.h>
#include <linux/workqueue.h>
#include <net/inet_sock.h>
#include <net/ipv6.h>
#include <net/net_namespace.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "shim.h"

/*
 * The socket's data_ready callback calls @ready(@owner) (receiving, in the callback's context,
 * when @ready is set), which says what else to queue; state_change and the doorbell, and
 * data_ready when @ready is not set, queue @work, which calls @run(@owner) in process context
 * (receiving, and what must sleep); iwarp_shim_sock_kick() queues @tx_work,
 * which calls @run_tx(@owner) (sending what receiving asked for, so receiving never waits on a
 * full send buffer). On write_space (send buffer freed by an acknowledgement) @space(@watch, ...)
 * decides whether the transmit work runs; the acknowledgement it waited for calls @acked(@owner)
 * right there (completing what it acknowledged without a work item's context switch), which says
 * what else to queue, or queues the transmit work when @acked is not set. Installed under
 * sk_callback_lock; removal takes the hook off the doorbell's list and waits for RCU readers,
 * restores the old callbacks under the lock and then waits for both works, so neither @owner nor
 * @watch is used after iwarp_shim_hook_remove() returns.
 */
struct iwarp_hook {
	struct sock *sk;
	void *owner;
	void (*run)(void *owner);
	void (*run_tx)(void *owner);
	unsigned int (*ready)(void *owner);
	const void *watch;
	unsigned int (*space)(const void *watch, u32 snd_una, bool writeable);
	unsigned int (*acked)(void *owner);
	struct work_struct work;
	struct work_struct tx_work;
	void (*old_data_ready)(struct sock *sk);
	void (*old_state_change)(struct sock *sk);
	void (*old_write_space)(struct sock *sk);
	/*
	 * The doorbell's view: the connection's addresses and ports as on the wire; IPv4
	 * addresses (also those of an IPv6 socket talking IPv4) as IPv4-mapped IPv6 ones.
	 */
	struct hlist_node node;
	bool listed;
	struct in6_addr laddr, raddr;
	__be16 lport, rport;
	/* Segments the doorbell saw out of order. */
	atomic64_t doorbells;
};

/*
 * Hooks of connections with the doorbell, hashed by their ports (RCU readers; writers hold the
 * lock): a packet costs one bucket's walk, however many connections are hooked. @iwarp_hooked
 * counts them, so a host without any pays one read per packet.
 */
#define IWARP_HOOK_BITS 10
static DEFINE_HASHTABLE(iwarp_hooks, IWARP_HOOK_BITS);
static DEFINE_SPINLOCK(iwarp_hooks_lock);
static atomic_t iwarp_hooked = ATOMIC_INIT(0);

static u32 iwarp_hook_key(__be16 lport, __be16 rport)
{
	return (u32)ntohs(lport) << 16 | ntohs(rport);
}

/*
 * The hook of @sk, if @sk is the connection it was installed on; caller holds sk_callback_lock.
 * A hooked socket the application disconnects (connect(AF_UNSPEC)) and makes listen is a
 * connection no more: its callbacks become TCP's at their next call (accept must be woken), and
 * the connections it accepts inherit the callbacks but never the hook, which is published with
 * SK_USER_DATA_NOCOPY.
 */
static struct iwarp_hook *iwarp_hook_of(const struct sock *sk)
{
	struct iwarp_hook *h = (struct iwarp_hook *)((uintptr_t)sk->sk_user_data & SK_USER_DATA_PTRMASK);

	return h && h->sk == sk && READ_ONCE(sk->sk_state) != TCP_LISTEN ? h : NULL;
}

/* TCP's own callbacks, taken at load from a socket of the module's (none is exported). */
void (*iwarp_tcp_data_ready)(struct sock *sk);
void (*iwarp_tcp_state_change)(struct sock *sk);
void (*iwarp_tcp_write_space)(struct sock *sk);

int iwarp_shim_hook_init(void)
{
	struct socket *sock;
	int err = sock_create_kern(&init_net, AF_INET, SOCK_STREAM, IPPROTO_TCP, &sock);

	if (err)
		return err;
	iwarp_tcp_data_ready = sock->sk->sk_data_ready;
	iwarp_tcp_state_change = sock->sk->sk_state_change;
	iwarp_tcp_write_space = sock->sk->sk_write_space;
	sock_release(sock);
	return 0;
}

static void iwarp_hook_data_ready(struct sock *sk);
static void iwarp_hook_data_wake(struct sock *sk);
static void iwarp_hook_state_change(struct sock *sk);
static void iwarp_hook_write_space(struct sock *sk);

/* Whether @f is one of the hook's callbacks. */
static bool iwarp_hook_ours(void (*f)(struct sock *sk))
{
	return f == iwarp_hook_data_ready || f == iwarp_hook_data_wake || f == iwarp_hook_state_change ||
	       f == iwarp_hook_write_space;
}

/*
 * A callback of the hook's or the waker's ran on a socket that is not theirs: one that
 * inherited the callbacks (see iwarp_hook_of()), or one let go since the call began. Whichever
 * of the module's callbacks it still has become TCP's own, so that nothing of the module's
 * stays on it. The caller then wakes as TCP would (never through the socket's current callback:
 * a ULP installed over ours calls ours from its own).
 */
void iwarp_disown(struct sock *sk)
{
	write_lock_bh(&sk->sk_callback_lock);
	if (iwarp_hook_ours(sk->sk_data_ready) || iwarp_waker_ours(sk->sk_data_ready))
		sk->sk_data_ready = iwarp_tcp_data_ready;
	if (iwarp_hook_ours(sk->sk_state_change) || iwarp_waker_ours(sk->sk_state_change))
		sk->sk_state_change = iwarp_tcp_state_change;
	if (iwarp_hook_ours(sk->sk_write_space) || iwarp_waker_ours(sk->sk_write_space))
		sk->sk_write_space = iwarp_tcp_write_space;
	write_unlock_bh(&sk->sk_callback_lock);
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

/* Queues the transmit (@tx) or receive work of the hook on @sock, if it is hooked. */
void iwarp_shim_sock_kick(struct socket *sock, bool tx)
{
	struct sock *sk = sock->sk;
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = iwarp_hook_of(sk);
	if (h)
		queue_work(system_highpri_wq, tx ? &h->tx_work : &h->work);
	read_unlock_bh(&sk->sk_callback_lock);
}

/* Segments of @sock's connection the doorbell rang for (0 if it is not hooked). */
u64 iwarp_shim_sock_doorbells(struct socket *sock)
{
	struct sock *sk = sock->sk;
	struct iwarp_hook *h;
	u64 n = 0;

	read_lock_bh(&sk->sk_callback_lock);
	h = iwarp_hook_of(sk);
	if (h)
		n = atomic64_read(&h->doorbells);
	read_unlock_bh(&sk->sk_callback_lock);
	return n;
}

/*
 * Runs in softirq context with the socket spinlock held: only queues the work. False if @sk is
 * not hooked (the caller wakes as TCP would).
 */
static bool iwarp_hook_wake(struct sock *sk)
{
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = iwarp_hook_of(sk);
	if (h)
		queue_work(system_highpri_wq, &h->work);
	read_unlock_bh(&sk->sk_callback_lock);
	if (!h)
		iwarp_disown(sk);
	return h;
}

/* data_ready of a hook that receives in its work. */
static void iwarp_hook_data_wake(struct sock *sk)
{
	if (!iwarp_hook_wake(sk))
		iwarp_tcp_data_ready(sk);
}

static void iwarp_hook_state_change(struct sock *sk)
{
	if (!iwarp_hook_wake(sk))
		iwarp_tcp_state_change(sk);
}

/*
 * The socket's data_ready: softirq with the socket's spinlock held, or its owner processing the
 * backlog at release_sock. The socket is locked either way, so the receive side reads TCP's
 * queue right here (as siw does), without a work item's context switch, and leaves what must
 * sleep to the works.
 */
static void iwarp_hook_data_ready(struct sock *sk)
{
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = iwarp_hook_of(sk);
	if (h) {
		unsigned int what = h->ready(h->owner);

		if (what & IWARP_WAKE_RX)
			queue_work(system_highpri_wq, &h->work);
		if (what & IWARP_WAKE_TX)
			queue_work(system_highpri_wq, &h->tx_work);
	}
	read_unlock_bh(&sk->sk_callback_lock);
	if (!h) {
		iwarp_disown(sk);
		iwarp_tcp_data_ready(sk);
	}
}

/*
 * Softirq context, socket spinlock held: send buffer was freed (an acknowledgement, or space for
 * a blocked sender). Wakes blocked senders, then does what the Rust side decides.
 */
static void iwarp_hook_write_space(struct sock *sk)
{
	struct iwarp_hook *h;

	read_lock_bh(&sk->sk_callback_lock);
	h = iwarp_hook_of(sk);
	if (h) {
		unsigned int what;

		h->old_write_space(sk);
		what = h->space(h->watch, READ_ONCE(tcp_sk(sk)->snd_una), sk_stream_is_writeable(sk));
		if (what & IWARP_SPACE_ACKED) {
			unsigned int wake = h->acked ? h->acked(h->owner) : IWARP_WAKE_TX;

			if (wake & IWARP_WAKE_RX)
				queue_work(system_highpri_wq, &h->work);
			if (wake & IWARP_WAKE_TX)
				what |= IWARP_SPACE_TRANSMIT;
		}
		if (what & IWARP_SPACE_TRANSMIT)
			queue_work(system_highpri_wq, &h->tx_work);
		if ((what & IWARP_SPACE_WATCH) && sk->sk_socket)
			set_bit(SOCK_NOSPACE, &sk->sk_socket->flags);
	}
	read_unlock_bh(&sk->sk_callback_lock);
	if (!h) {
		iwarp_disown(sk);
		iwarp_tcp_write_space(sk);
	}
}

/*
 * The doorbell: NF_INET_LOCAL_IN, softirq, under RCU, before TCP has seen the segment. It only
 * looks: a segment with payload above rcv_nxt on a hooked connection queues the hook's work,
 * which reads TCP's out-of-order queue under the socket lock (so only what TCP accepted is ever
 * placed). It never changes, keeps or drops a packet. While the socket is owned (the work holds
 * its lock), TCP only queues segments in its backlog and rcv_nxt lags, so in-order segments
 * would look out of order: it does not ring then, and the work looks again after releasing the
 * lock, when TCP has processed the backlog (src/qp/receive.rs).
 */
/*
 * Rings for a TCP segment from @saddr to @daddr whose header is at @thoff, if it carries
 * payload above rcv_nxt of a listed connection (and the receive work does not own the socket).
 */
static void iwarp_doorbell_ring(struct sk_buff *skb, const struct in6_addr *saddr, const struct in6_addr *daddr,
				unsigned int thoff, const struct net *net)
{
	struct tcphdr _th;
	const struct tcphdr *th = skb_header_pointer(skb, thoff, sizeof(_th), &_th);
	struct iwarp_hook *h;

	if (!th || skb->len <= thoff + th->doff * 4)
		return;
	hash_for_each_possible_rcu(iwarp_hooks, h, node, iwarp_hook_key(th->dest, th->source)) {
		if (h->lport != th->dest || h->rport != th->source || !ipv6_addr_equal(&h->laddr, daddr) ||
		    !ipv6_addr_equal(&h->raddr, saddr) || !net_eq(sock_net(h->sk), net))
			continue;
		if (after(ntohl(th->seq), READ_ONCE(tcp_sk(h->sk)->rcv_nxt)) && !sock_owned_by_user_nocheck(h->sk)) {
			atomic64_inc(&h->doorbells);
			queue_work(system_highpri_wq, &h->work);
		}
		return;
	}
}

static unsigned int iwarp_doorbell4(void *priv, struct sk_buff *skb, const struct nf_hook_state *state)
{
	const struct iphdr *iph = ip_hdr(skb);
	struct in6_addr saddr, daddr;

	if (!atomic_read(&iwarp_hooked) || iph->protocol != IPPROTO_TCP)
		return NF_ACCEPT;
	ipv6_addr_set_v4mapped(iph->saddr, &saddr);
	ipv6_addr_set_v4mapped(iph->daddr, &daddr);
	iwarp_doorbell_ring(skb, &saddr, &daddr, ip_hdrlen(skb), state->net);
	return NF_ACCEPT;
}

static unsigned int iwarp_doorbell6(void *priv, struct sk_buff *skb, const struct nf_hook_state *state)
{
	const struct ipv6hdr *ip6h = ipv6_hdr(skb);
	u8 nexthdr = ip6h->nexthdr;
	__be16 frag_off;
	int thoff;

	if (!atomic_read(&iwarp_hooked))
		return NF_ACCEPT;
	thoff = ipv6_skip_exthdr(skb, sizeof(*ip6h), &nexthdr, &frag_off);
	if (thoff < 0 || nexthdr != IPPROTO_TCP)
		return NF_ACCEPT;
	iwarp_doorbell_ring(skb, &ip6h->saddr, &ip6h->daddr, thoff, state->net);
	return NF_ACCEPT;
}

/* Last in each family: after every filter that may still drop the packet. */
static const struct nf_hook_ops iwarp_doorbell_ops[] = {
	{ .hook = iwarp_doorbell4, .pf = NFPROTO_IPV4, .hooknum = NF_INET_LOCAL_IN, .priority = NF_IP_PRI_LAST },
	{ .hook = iwarp_doorbell6, .pf = NFPROTO_IPV6, .hooknum = NF_INET_LOCAL_IN, .priority = NF_IP6_PRI_LAST },
};

static int __net_init iwarp_doorbell_net_init(struct net *net)
{
	return nf_register_net_hooks(net, iwarp_doorbell_ops, ARRAY_SIZE(iwarp_doorbell_ops));
}

static void __net_exit iwarp_doorbell_net_exit(struct net *net)
{
	nf_unregister_net_hooks(net, iwarp_doorbell_ops, ARRAY_SIZE(iwarp_doorbell_ops));
}

static struct pernet_operations iwarp_doorbell_net_ops = {
	.init = iwarp_doorbell_net_init,
	.exit = iwarp_doorbell_net_exit,
};

/* Registers the doorbell in every network namespace, present and future. */
int iwarp_shim_doorbell_register(void)
{
	return register_pernet_subsys(&iwarp_doorbell_net_ops);
}

void iwarp_shim_doorbell_unregister(void)
{
	unregister_pernet_subsys(&iwarp_doorbell_net_ops);
}

/*
 * Hooks @sock, with the doorbell if @doorbell, receiving in data_ready if @ready is set;
 * returns the hook or an ERR_PTR (-EBUSY: the socket has a user already).
 */
struct iwarp_hook *iwarp_shim_hook_install(struct socket *sock, void *owner, void (*run)(void *owner),
					   void (*run_tx)(void *owner), unsigned int (*ready)(void *owner),
					   const void *watch,
					   unsigned int (*space)(const void *watch, u32 snd_una, bool writeable),
					   unsigned int (*acked)(void *owner), bool doorbell)
{
	struct sock *sk = sock->sk;
	struct iwarp_hook *h = kzalloc(sizeof(*h), GFP_KERNEL_ACCOUNT);

	if (!h)
		return ERR_PTR(-ENOMEM);
	h->sk = sk;
	h->owner = owner;
	h->run = run;
	h->run_tx = run_tx;
	h->ready = ready;
	h->watch = watch;
	h->space = space;
	h->acked = acked;
	INIT_WORK(&h->work, iwarp_hook_work);
	INIT_WORK(&h->tx_work, iwarp_hook_tx_work);
	INIT_HLIST_NODE(&h->node);
	write_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_user_data) {
		write_unlock_bh(&sk->sk_callback_lock);
		kfree(h);
		return ERR_PTR(-EBUSY);
	}
	h->old_data_ready = sk->sk_data_ready;
	h->old_state_change = sk->sk_state_change;
	h->old_write_space = sk->sk_write_space;
	__rcu_assign_sk_user_data_with_flags(sk, h, SK_USER_DATA_NOCOPY);
	sk->sk_data_ready = ready ? iwarp_hook_data_ready : iwarp_hook_data_wake;
	sk->sk_state_change = iwarp_hook_state_change;
	sk->sk_write_space = iwarp_hook_write_space;
	write_unlock_bh(&sk->sk_callback_lock);
	if (doorbell) {
		const struct inet_sock *inet = inet_sk(sk);

		if (sk->sk_family == AF_INET6) {
			h->laddr = sk->sk_v6_rcv_saddr;
			h->raddr = sk->sk_v6_daddr;
		} else {
			ipv6_addr_set_v4mapped(inet->inet_saddr, &h->laddr);
			ipv6_addr_set_v4mapped(inet->inet_daddr, &h->raddr);
		}
		h->lport = inet->inet_sport;
		h->rport = inet->inet_dport;
		h->listed = true;
		spin_lock_bh(&iwarp_hooks_lock);
		hash_add_rcu(iwarp_hooks, &h->node, iwarp_hook_key(h->lport, h->rport));
		atomic_inc(&iwarp_hooked);
		spin_unlock_bh(&iwarp_hooks_lock);
	}
	/* Whatever arrived, or could not be sent, before the hook was in place. */
	queue_work(system_highpri_wq, &h->work);
	queue_work(system_highpri_wq, &h->tx_work);
	return h;
}

/*
 * Takes @h off the doorbell's list and waits out its readers, restores the socket's callbacks,
 * waits for a running or queued work to finish, frees @h. May sleep.
 */
void iwarp_shim_hook_remove(struct iwarp_hook *h)
{
	struct sock *sk = h->sk;

	if (h->listed) {
		spin_lock_bh(&iwarp_hooks_lock);
		hash_del_rcu(&h->node);
		atomic_dec(&iwarp_hooked);
		spin_unlock_bh(&iwarp_hooks_lock);
		synchronize_rcu();
	}
	write_lock_bh(&sk->sk_callback_lock);
	rcu_assign_sk_user_data(sk, NULL);
	/* A callback another user installed over ours since (and calls) is left to it. */
	if (iwarp_hook_ours(sk->sk_data_ready))
		sk->sk_data_ready = h->old_data_ready;
	if (iwarp_hook_ours(sk->sk_state_change))
		sk->sk_state_change = h->old_state_change;
	if (iwarp_hook_ours(sk->sk_write_space))
		sk->sk_write_space = h->old_write_space;
	write_unlock_bh(&sk->sk_callback_lock);
	/* Nothing can queue either work now (kicks look the hook up under the lock). */
	cancel_work_sync(&h->work);
	cancel_work_sync(&h->tx_work);
	kfree(h);
}
