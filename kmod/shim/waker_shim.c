// SPDX-License-Identifier: GPL-2.0
/*
 * A socket's waker (src/socket/waker.rs): connection setup driven by the sockets' callbacks
 * instead of waiting. A socket's data_ready, state_change and write_space (a connection whose
 * MPA exchange runs, or a listener and each connection it watches: accepted, its MPA request on
 * the way) queue one delayed work that
 * calls @run(@owner) in process context, charging what it allocates to the memory cgroup of the
 * process that listened; what it does there is decided in Rust. TCP may call a callback it read
 * before the callbacks were restored: each looks under sk_callback_lock (read) whether the
 * socket's callbacks are still the waker's, and the waker is found in sk_user_data; so once a
 * socket's callbacks are restored under the lock (write), no call uses the waker.
 */
#include <linux/err.h>
#include <linux/memcontrol.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <net/sock.h>

#include "shim.h"

struct iwarp_waker {
	struct sock *sk;
	void *owner;
	void (*run)(void *owner);
	struct delayed_work work;
	/* The listening process's memory cgroup (a reference), which the work charges. */
	struct mem_cgroup *memcg;
	/* The socket's callbacks (a listener's: its connections inherit them when TCP clones them). */
	void (*old_data_ready)(struct sock *sk);
	void (*old_state_change)(struct sock *sk);
	void (*old_write_space)(struct sock *sk);
};

static void iwarp_waker_work(struct work_struct *work)
{
	struct iwarp_waker *w = container_of(to_delayed_work(work), struct iwarp_waker, work);
	struct mem_cgroup *old = set_active_memcg(w->memcg);

	w->run(w->owner);
	set_active_memcg(old);
}

static void iwarp_waker_state_change(struct sock *sk);
static void iwarp_waker_write_space(struct sock *sk);

/*
 * Queues the work of the socket's waker (of a listener, or of a connection it watches); false
 * if the socket has none. A connection TCP cloned from a listener has the callbacks too, but
 * no waker (the listener's is not copied): TCP's own callbacks go back on it (the module's
 * listener watches its connections later, which sets the waker's again; one an application
 * made listen, an adopted socket whose MPA exchange runs, never will).
 */
static bool iwarp_waker_queue(struct sock *sk)
{
	struct iwarp_waker *w;

	read_lock_bh(&sk->sk_callback_lock);
	rcu_read_lock();
	w = rcu_dereference_sk_user_data(sk);
	/* Restored meanwhile, and maybe hooked by a QP since: its sk_user_data is not ours. */
	if (w && sk->sk_state_change == iwarp_waker_state_change)
		mod_delayed_work(system_dfl_wq, &w->work, 0);
	rcu_read_unlock();
	read_unlock_bh(&sk->sk_callback_lock);
	if (!w)
		iwarp_disown(sk);
	return w;
}

static void iwarp_waker_data_ready(struct sock *sk)
{
	if (!iwarp_waker_queue(sk))
		iwarp_tcp_data_ready(sk);
}

static void iwarp_waker_state_change(struct sock *sk)
{
	if (!iwarp_waker_queue(sk))
		iwarp_tcp_state_change(sk);
}

/* Whether @cb is one of the waker's callbacks (iwarp_disown()). */
bool iwarp_waker_ours(void (*cb)(struct sock *sk))
{
	return cb == iwarp_waker_data_ready || cb == iwarp_waker_state_change || cb == iwarp_waker_write_space;
}

/*
 * write_space: the socket's own callback first (an adopted socket's writers and pollers wait
 * on it), then the work, if the socket takes more now (it is called on every acknowledgement
 * while SOCK_NOSPACE is set).
 */
static void iwarp_waker_write_space(struct sock *sk)
{
	void (*now)(struct sock *sk);
	struct iwarp_waker *w;

	read_lock_bh(&sk->sk_callback_lock);
	rcu_read_lock();
	w = rcu_dereference_sk_user_data(sk);
	now = READ_ONCE(sk->sk_write_space);
	if (w && sk->sk_state_change == iwarp_waker_state_change) {
		w->old_write_space(sk);
		if (sk_stream_is_writeable(sk))
			mod_delayed_work(system_dfl_wq, &w->work, 0);
	} else if (now != iwarp_waker_write_space) {
		/* Restored (or hooked by a QP) after TCP read the callback: the one in place now. */
		now(sk);
	}
	rcu_read_unlock();
	read_unlock_bh(&sk->sk_callback_lock);
	if (!w && now == iwarp_waker_write_space) {
		/* Cloned with the waker's callbacks and no waker (see iwarp_waker_queue()). */
		iwarp_disown(sk);
		iwarp_tcp_write_space(sk);
	}
}

/* Puts back the callbacks a socket had before the waker (a connection: its listener's). */
static void iwarp_waker_restore(const struct iwarp_waker *w, struct sock *sk)
{
	write_lock_bh(&sk->sk_callback_lock);
	rcu_assign_sk_user_data(sk, NULL);
	sk->sk_data_ready = w->old_data_ready;
	sk->sk_state_change = w->old_state_change;
	sk->sk_write_space = w->old_write_space;
	write_unlock_bh(&sk->sk_callback_lock);
}

/*
 * Wakes @owner's @run on @sock's callbacks; runs it once at once too. Returns the waker or an
 * ERR_PTR (-EBUSY: the socket has a user already).
 */
struct iwarp_waker *iwarp_shim_waker_install(struct socket *sock, void *owner, void (*run)(void *owner))
{
	struct sock *sk = sock->sk;
	struct iwarp_waker *w = kzalloc(sizeof(*w), GFP_KERNEL_ACCOUNT);

	if (!w)
		return ERR_PTR(-ENOMEM);
	w->sk = sk;
	w->owner = owner;
	w->run = run;
	w->memcg = get_mem_cgroup_from_mm(current->mm);
	INIT_DELAYED_WORK(&w->work, iwarp_waker_work);
	write_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_user_data) {
		write_unlock_bh(&sk->sk_callback_lock);
		mem_cgroup_put(w->memcg);
		kfree(w);
		return ERR_PTR(-EBUSY);
	}
	w->old_data_ready = sk->sk_data_ready;
	w->old_state_change = sk->sk_state_change;
	w->old_write_space = sk->sk_write_space;
	/* Not copied into the connections TCP clones from a listener. */
	__rcu_assign_sk_user_data_with_flags(sk, w, SK_USER_DATA_NOCOPY);
	sk->sk_data_ready = iwarp_waker_data_ready;
	sk->sk_state_change = iwarp_waker_state_change;
	sk->sk_write_space = iwarp_waker_write_space;
	write_unlock_bh(&sk->sk_callback_lock);
	mod_delayed_work(system_dfl_wq, &w->work, 0);
	return w;
}

/* Runs @w's work after @ms milliseconds, unless it is queued to run sooner. */
void iwarp_shim_waker_later(struct iwarp_waker *w, unsigned int ms)
{
	queue_delayed_work(system_dfl_wq, &w->work, msecs_to_jiffies(ms));
}

/* Runs @w's work now. */
void iwarp_shim_waker_kick(struct iwarp_waker *w)
{
	mod_delayed_work(system_dfl_wq, &w->work, 0);
}

/*
 * Wakes @w's work on the callbacks of @conn, a connection accepted from its listener (it
 * inherited the listener's callbacks, with no waker).
 */
void iwarp_shim_waker_watch(struct iwarp_waker *w, struct socket *conn)
{
	struct sock *sk = conn->sk;

	write_lock_bh(&sk->sk_callback_lock);
	rcu_assign_sk_user_data(sk, w);
	sk->sk_data_ready = iwarp_waker_data_ready;
	sk->sk_state_change = iwarp_waker_state_change;
	sk->sk_write_space = iwarp_waker_write_space;
	write_unlock_bh(&sk->sk_callback_lock);
}

/*
 * Gives @conn, accepted from @w's listener (watched or not), the callbacks TCP gave the listener:
 * after this it is a plain socket again, which a QP may hook.
 */
void iwarp_shim_waker_unwatch(struct iwarp_waker *w, struct socket *conn)
{
	iwarp_waker_restore(w, conn->sk);
}

/*
 * Restores the socket's callbacks, waits for a queued or running work, frees @w. Every
 * connection accepted from a listener must have been unwatched. May sleep; never from @w's
 * own work.
 */
void iwarp_shim_waker_remove(struct iwarp_waker *w)
{
	iwarp_waker_restore(w, w->sk);
	cancel_delayed_work_sync(&w->work);
	mem_cgroup_put(w->memcg);
	kfree(w);
}
