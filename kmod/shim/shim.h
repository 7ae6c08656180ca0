/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C shim: what Rust cannot reach through the kernel crate or its bindings (static inlines,
 * macros, struct fields, and APIs that take C callbacks). Bindgen turns this header into the
 * module's Rust declarations at build time (Kbuild: shim_bindings.rs), so the two sides cannot
 * disagree; kernel structures stay opaque here and are the kernel crate's on the Rust side.
 * Functions that create an object return it or an ERR_PTR (from_err_ptr() on the Rust side).
 */
#ifndef IWARP_SHIM_H
#define IWARP_SHIM_H

#include <linux/types.h>

struct bio_vec;
struct miscdevice;
struct page;
struct sk_buff;
struct socket;
struct vm_area_struct;
struct spinlock;

/* sync_shim.c: spinlocks taken with bottom halves off */
void iwarp_shim_spin_lock_bh(struct spinlock *lock);
int iwarp_shim_spin_trylock_bh(struct spinlock *lock);
void iwarp_shim_spin_unlock_bh(struct spinlock *lock);
void iwarp_shim_spin_assert_held(struct spinlock *lock);

/* dev_shim.c: the misc device */
void iwarp_shim_misc_pin_module(struct miscdevice *misc);

/* net_shim.c: CRC */
u32 iwarp_shim_crc32c(u32 crc, const void *p, size_t len);

/* net_shim.c: kernel TCP sockets */
int iwarp_shim_tcp_probe(u16 *port, u32 *write_seq);
struct socket *iwarp_shim_sock_adopt(int fd);
struct socket *iwarp_shim_sock_connect(u32 addr, u16 port);
int iwarp_shim_sock_connected(struct socket *sock);
struct socket *iwarp_shim_sock_listen(u32 addr, u16 *port, int backlog);
struct socket *iwarp_shim_sock_accept(struct socket *listener, u32 *addr, u16 *port);
void iwarp_shim_sock_put(struct socket *sock);
void iwarp_shim_sock_shutdown(struct socket *sock, bool send_only);
bool iwarp_shim_sock_established(struct socket *sock);
int iwarp_shim_sock_send_all(struct socket *sock, const void *buf, size_t len);
int iwarp_shim_sock_send_nowait(struct socket *sock, const void *buf, size_t len);
int iwarp_shim_sock_recv_nowait(struct socket *sock, void *buf, size_t len);
long iwarp_shim_sock_send_pages(struct socket *sock, struct bio_vec *bv, size_t n, const u32 *records, size_t nrec,
				bool eor, bool more, u32 *end_seq);
void iwarp_shim_sock_nodelay(struct socket *sock);
u32 iwarp_shim_sock_snd_una(struct socket *sock);
u32 iwarp_shim_sock_mss(struct socket *sock);
void iwarp_shim_sock_want_write_space(struct socket *sock);

/* One end of a connection, laid out as the ABI's Endpoint (address in network order). */
struct iwarp_endpoint {
	u16 family;
	u16 port;
	u8 addr[16];
};
void iwarp_shim_sock_endpoints(struct socket *sock, struct iwarp_endpoint *local, struct iwarp_endpoint *remote);

/* rx_shim.c: the socket lock, the receive and out-of-order queues, and their skbs */
void iwarp_shim_sock_lock(struct socket *sock);
void iwarp_shim_sock_release(struct socket *sock);
int iwarp_shim_sock_read(struct socket *sock, void *ctx,
			 int (*actor)(void *ctx, struct sk_buff *skb, u32 offset, size_t len));
struct sk_buff *iwarp_shim_rx_next(struct socket *sock, struct sk_buff *skb);
u32 iwarp_shim_sock_copied_seq(struct socket *sock);
u32 iwarp_shim_sock_ooo_packets(struct socket *sock);
u32 iwarp_shim_sock_unread(struct socket *sock);
struct sk_buff *iwarp_shim_ooo_first(struct socket *sock);
struct sk_buff *iwarp_shim_ooo_next(struct sk_buff *skb);
u32 iwarp_shim_skb_seq(const struct sk_buff *skb);
u32 iwarp_shim_skb_len(const struct sk_buff *skb);
const u8 *iwarp_shim_skb_head(const struct sk_buff *skb, u32 *len);
int iwarp_shim_skb_nr_frags(const struct sk_buff *skb);
const u8 *iwarp_shim_skb_frag(const struct sk_buff *skb, int i, u32 *len);
struct sk_buff *iwarp_shim_skb_frag_list(const struct sk_buff *skb);
struct sk_buff *iwarp_shim_skb_next(const struct sk_buff *skb);

/* hook_shim.c: the hook that runs a QP's work when its socket calls back, and the doorbell */
/* What the hook's write_space does, as decided by @space (a mask). */
#define IWARP_SPACE_TRANSMIT 1u	/* queue the transmit work */
#define IWARP_SPACE_WATCH 2u	/* keep SOCK_NOSPACE set: call again on the next acknowledgement */
/* What the hook's data_ready does after @ready ran, as it decides (a mask). */
#define IWARP_WAKE_RX 1u	/* queue the receive work (what must sleep, or the out-of-order walk) */
#define IWARP_WAKE_TX 2u	/* queue the transmit work (Read Requests to answer) */
struct iwarp_hook;
struct iwarp_hook *iwarp_shim_hook_install(struct socket *sock, void *owner, void (*run)(void *owner),
					   void (*run_tx)(void *owner), unsigned int (*ready)(void *owner),
					   const void *watch,
					   unsigned int (*space)(const void *watch, u32 snd_una, bool writeable),
					   bool doorbell);
void iwarp_shim_sock_kick(struct socket *sock, bool tx);
u64 iwarp_shim_sock_doorbells(struct socket *sock);
void iwarp_shim_hook_remove(struct iwarp_hook *h);
int iwarp_shim_doorbell_register(void);
void iwarp_shim_doorbell_unregister(void);

/* waker_shim.c: setup work, run when a socket (or a connection its listener watches) calls back */
struct iwarp_waker;
struct iwarp_waker *iwarp_shim_waker_install(struct socket *sock, void *owner, void (*run)(void *owner));
void iwarp_shim_waker_later(struct iwarp_waker *w, unsigned int ms);
void iwarp_shim_waker_kick(struct iwarp_waker *w);
void iwarp_shim_waker_watch(struct iwarp_waker *w, struct socket *conn);
void iwarp_shim_waker_unwatch(struct iwarp_waker *w, struct socket *conn);
void iwarp_shim_waker_remove(struct iwarp_waker *w);

/* mem_shim.c: pinned user memory */
struct iwarp_pinned;
struct iwarp_pinned *iwarp_shim_pin_user(u64 addr, u64 len, bool writable);
void iwarp_shim_unpin_user(struct iwarp_pinned *p);
void iwarp_shim_unpin_user_later(struct iwarp_pinned *p);
void iwarp_shim_unpin_flush(void);
unsigned long iwarp_shim_pinned_npages(const struct iwarp_pinned *p);
void iwarp_shim_pinned_copy_from(const struct iwarp_pinned *p, u64 offset, void *dst, size_t len);
void iwarp_shim_pinned_copy_to(const struct iwarp_pinned *p, u64 offset, const void *src, size_t len);
struct page *iwarp_shim_pinned_page(const struct iwarp_pinned *p, unsigned long idx);
void *iwarp_shim_page_address(struct page *page);

/* mem_shim.c: rings user space maps */
void *iwarp_shim_ring_alloc(size_t bytes);
void iwarp_shim_ring_free(void *ring);
int iwarp_shim_ring_mmap(struct vm_area_struct *vma, void *ring, size_t bytes);
void *iwarp_shim_kvrealloc_charged(const void *p, size_t size, unsigned long align);
int iwarp_shim_charged_room(void);
unsigned long iwarp_shim_vma_pgoff(const struct vm_area_struct *vma);

/* ib_shim.c: a device of the kernel's RDMA core per rdma link (src/ib/) */
struct ib_device;
struct net_device;
/* What the RDMA core is told of the engine's limits (src/verbs.rs). */
struct iwarp_ib_limits {
	u64 max_mr_size;
	u32 max_message;
	u32 max_qp;
	u32 max_qp_wr;
	u32 max_sge;
	u32 max_cq;
	u32 max_cqe;
	u32 max_mr;
	u32 max_pd;
	u32 max_ird_ord;
};
/* Netdev events a device follows. */
enum iwarp_netdev_event {
	IWARP_NETDEV_UP,
	IWARP_NETDEV_DOWN,
	IWARP_NETDEV_UNREGISTER,
};
/* Rust's side (src/ib/link.rs), called in process context. */
struct iwarp_ib_callbacks {
	/* rdma link add NAME type iwarp netdev NDEV: 0 or an errno. */
	int (*newlink)(const char *name, struct net_device *ndev);
	/* A netdev event (RTNL held). */
	void (*netdev_event)(struct net_device *ndev, enum iwarp_netdev_event what);
	/* The RDMA core is done with @dev (its dealloc_driver): forget it. */
	void (*gone)(struct ib_device *dev);
};
int iwarp_shim_ib_register(const struct iwarp_ib_callbacks *cb, const struct iwarp_ib_limits *limits);
void iwarp_shim_ib_unregister(void);
bool iwarp_shim_netdev_is_ethernet(const struct net_device *ndev);
struct ib_device *iwarp_shim_ib_device_create(struct net_device *ndev);
int iwarp_shim_ib_device_register(struct ib_device *dev, const char *name);
void iwarp_shim_ib_device_free(struct ib_device *dev);
void iwarp_shim_ib_device_hold(struct ib_device *dev);
void iwarp_shim_ib_device_drop(struct ib_device *dev);
void iwarp_shim_ib_device_unregister_and_drop(struct ib_device *dev);
bool iwarp_shim_ib_device_unregister_queued(struct ib_device *dev);
void iwarp_shim_ib_port_event(struct ib_device *dev, bool active);

#endif
