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
struct workqueue_struct;

/* sync_shim.c: spinlocks taken with bottom halves off, or interrupts off */
void iwarp_shim_spin_lock_bh(struct spinlock *lock);
int iwarp_shim_spin_trylock_bh(struct spinlock *lock);
void iwarp_shim_spin_unlock_bh(struct spinlock *lock);
void iwarp_shim_local_bh_disable(void);
void iwarp_shim_local_bh_enable(void);
unsigned long iwarp_shim_spin_lock_irqsave(struct spinlock *lock);
int iwarp_shim_spin_trylock_irqsave(struct spinlock *lock, unsigned long *flags);
void iwarp_shim_spin_unlock_irqrestore(struct spinlock *lock, unsigned long flags);
void iwarp_shim_spin_assert_held(struct spinlock *lock);

/* dev_shim.c: the misc device */
void iwarp_shim_misc_pin_module(struct miscdevice *misc);

/* net_shim.c: CRC */
u32 iwarp_shim_crc32c(u32 crc, const void *p, size_t len);

/* net_shim.c: kernel TCP sockets */
int iwarp_shim_tcp_probe(u16 *port, u32 *write_seq);
struct socket *iwarp_shim_sock_adopt(int fd);
struct iwarp_endpoint;
struct socket *iwarp_shim_sock_connect(const struct iwarp_endpoint *to, const struct iwarp_endpoint *from);
int iwarp_shim_sock_connected(struct socket *sock);
struct socket *iwarp_shim_sock_listen(const struct iwarp_endpoint *at, u16 *port, int backlog, bool v6only, int ifindex);
struct socket *iwarp_shim_sock_accept(struct socket *listener, struct iwarp_endpoint *peer);
void iwarp_shim_sock_put(struct socket *sock);
void iwarp_shim_sock_shutdown(struct socket *sock, bool send_only);
bool iwarp_shim_sock_established(struct socket *sock);
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
	/* IPv6: the interface a link-local address is on (sin6_scope_id); else 0. */
	u32 scope_id;
};
void iwarp_shim_sock_endpoints(struct socket *sock, struct iwarp_endpoint *local, struct iwarp_endpoint *remote);
/* For the shim's own files (not Rust's): @ss as an endpoint, and back (0: no such family). */
struct sockaddr_storage;
void iwarp_endpoint_from(struct iwarp_endpoint *ep, const struct sockaddr_storage *ss);
int iwarp_sockaddr_from(struct sockaddr_storage *ss, const struct iwarp_endpoint *ep);

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
#define IWARP_SPACE_ACKED 4u	/* the acknowledgement awaited came: @acked, else the transmit work */
/* What the hook's data_ready does after @ready ran, as it decides (a mask). */
#define IWARP_WAKE_RX 1u	/* queue the receive work (what must sleep, or the out-of-order walk) */
#define IWARP_WAKE_TX 2u	/* queue the transmit work (Read Requests to answer) */
struct iwarp_hook;
struct iwarp_hook *iwarp_shim_hook_install(struct socket *sock, void *owner, void (*run)(void *owner),
					   void (*run_tx)(void *owner), unsigned int (*ready)(void *owner),
					   const void *watch,
					   unsigned int (*space)(const void *watch, u32 snd_una, bool writeable),
					   unsigned int (*acked)(void *owner), bool doorbell);
void iwarp_shim_sock_kick(struct socket *sock, bool tx);
u64 iwarp_shim_sock_doorbells(struct socket *sock);
void iwarp_shim_hook_remove(struct iwarp_hook *h);
/* Takes TCP's own socket callbacks (process context, at load). */
int iwarp_shim_hook_init(void);

/*
 * Within the shim (hook_shim.c, waker_shim.c; not for Rust): a socket that inherited the
 * module's callbacks without its state (a connection cloned from a socket the module hooks or
 * watches) gets TCP's own back; the caller then wakes as TCP would, through these.
 */
struct sock;
void iwarp_disown(struct sock *sk);
bool iwarp_waker_ours(void (*cb)(struct sock *sk));
extern void (*iwarp_tcp_data_ready)(struct sock *sk);
extern void (*iwarp_tcp_state_change)(struct sock *sk);
extern void (*iwarp_tcp_write_space)(struct sock *sk);
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
struct page *iwarp_shim_kernel_page_get(u64 addr);
void iwarp_shim_kernel_page_put(struct page *page);

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
	u32 max_page_list;
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
/*
 * ib_shim.c: the RDMA core's verbs, answered by Rust (src/ib/verbs.rs). Each object's container
 * carries what Rust gave for it (a pointer or a handle); work requests and completions cross
 * flattened. Values of the RDMA core's enums and flags that Rust reads or writes are mirrored
 * here (ib_shim.c asserts each equals the kernel's).
 */
struct ib_cq;
struct ib_qp;
/* enum ib_wr_opcode */
#define IWARP_IB_WR_RDMA_WRITE 0u
#define IWARP_IB_WR_SEND 2u
#define IWARP_IB_WR_RDMA_READ 4u
#define IWARP_IB_WR_LOCAL_INV 7u
#define IWARP_IB_WR_SEND_WITH_INV 9u
#define IWARP_IB_WR_RDMA_READ_WITH_INV 11u
#define IWARP_IB_WR_REG_MR 0x20u
/* Access flags a device may ignore (struct ib_reg_wr's access, ib_reg_mr's). */
#define IWARP_IB_ACCESS_OPTIONAL 0x3ff00000u
/* enum ib_send_flags */
#define IWARP_IB_SEND_FENCE 1u
#define IWARP_IB_SEND_SIGNALED 2u
#define IWARP_IB_SEND_SOLICITED 4u
#define IWARP_IB_SEND_INLINE 8u
/* A link's MPA options (its sysfs files mpa_markers, mpa_crc, mpa_rev, mpa_p2p): bits of dev_mpa. */
#define IWARP_MPA_MARKERS 1u
#define IWARP_MPA_CRC 2u
/* Revision 1 (RFC 5044) rather than 2 (RFC 6581). */
#define IWARP_MPA_REV1 4u
/* Peer-to-peer mode (revision 2): an RTR message before the first FPDU. */
#define IWARP_MPA_P2P 8u
/* enum ib_wc_status */
#define IWARP_IB_WC_SUCCESS 0u
#define IWARP_IB_WC_LOC_PROT_ERR 4u
#define IWARP_IB_WC_WR_FLUSH_ERR 5u
#define IWARP_IB_WC_FATAL_ERR 19u
/* enum ib_wc_opcode */
#define IWARP_IB_WC_SEND 0u
#define IWARP_IB_WC_RDMA_WRITE 1u
#define IWARP_IB_WC_RDMA_READ 2u
#define IWARP_IB_WC_COMP_SWAP 3u
#define IWARP_IB_WC_FETCH_ADD 4u
#define IWARP_IB_WC_LOCAL_INV 6u
#define IWARP_IB_WC_REG_MR 10u
#define IWARP_IB_WC_RECV 128u
/* enum ib_wc_flags */
#define IWARP_IB_WC_WITH_INVALIDATE 4u
/* enum ib_qp_state */
#define IWARP_IB_QPS_RESET 0u
#define IWARP_IB_QPS_INIT 1u
#define IWARP_IB_QPS_RTR 2u
#define IWARP_IB_QPS_RTS 3u
#define IWARP_IB_QPS_SQD 4u
#define IWARP_IB_QPS_ERR 6u
/* enum ib_qp_attr_mask: IB_QP_STATE */
#define IWARP_IB_QP_STATE 1u
/* enum ib_cq_notify_flags */
#define IWARP_IB_CQ_SOLICITED 1u
#define IWARP_IB_CQ_SOLICITED_MASK 3u
#define IWARP_IB_CQ_REPORT_MISSED_EVENTS 4u
/* enum ib_event_type: the asynchronous events a QP reports */
#define IWARP_IB_EVENT_QP_FATAL 1u
#define IWARP_IB_EVENT_QP_ACCESS_ERR 3u
/* A scatter/gather entry, laid out as struct ib_sge. */
struct iwarp_ib_sge {
	u64 addr;
	u32 length;
	u32 lkey;
};
/* A send work request: struct ib_send_wr with what its container (ib_rdma_wr) adds. */
struct iwarp_ib_send_wr {
	u64 wr_id;
	const struct iwarp_ib_sge *sge;
	u32 num_sge;
	u32 opcode;
	u32 flags;
	u32 invalidate_rkey;
	u64 remote_addr;
	u32 rkey;
	/*
	 * IB_WR_REG_MR: the key in rkey, the region's lkey in invalidate_rkey, its iova in
	 * remote_addr, its length, the access.
	 */
	u64 length;
	int access;
};
/* A receive work request: struct ib_recv_wr. */
struct iwarp_ib_recv_wr {
	u64 wr_id;
	const struct iwarp_ib_sge *sge;
	u32 num_sge;
};
/* A completion, for struct ib_wc. */
struct iwarp_ib_wc {
	u64 wr_id;
	struct ib_qp *qp;
	u32 status;
	u32 opcode;
	u32 byte_len;
	u32 flags;
	u32 invalidate_rkey;
};
/*
 * A ring a user process maps (siw's ABI): Rust's reference to it (the mapping's, dropped with
 * verbs->ring_put once nothing can map it any more), its vmalloc memory and its length (whole
 * pages).
 */
struct iwarp_mapped_ring {
	void *rust;
	void *addr;
	size_t bytes;
};
/* siw's user ABI (include/uapi/rdma/siw-abi.h; ib_shim.c asserts these): entry sizes, */
#define IWARP_SIW_SQE_SIZE 120u
#define IWARP_SIW_RQE_SIZE 112u
#define IWARP_SIW_CQE_SIZE 32u
#define IWARP_SIW_CQ_CTRL_SIZE 8u
/* enum siw_wqe_flags, */
#define IWARP_SIW_WQE_VALID 1u
#define IWARP_SIW_WQE_INLINE 2u
#define IWARP_SIW_WQE_SIGNALLED 4u
#define IWARP_SIW_WQE_SOLICITED 8u
#define IWARP_SIW_WQE_READ_FENCE 16u
/* enum siw_opcode, */
#define IWARP_SIW_OP_WRITE 0u
#define IWARP_SIW_OP_READ 1u
#define IWARP_SIW_OP_SEND 3u
#define IWARP_SIW_OP_SEND_REMOTE_INV 5u
#define IWARP_SIW_OP_FETCH_AND_ADD 6u
#define IWARP_SIW_OP_COMP_AND_SWAP 7u
#define IWARP_SIW_OP_RECEIVE 8u
#define IWARP_SIW_OP_INVAL_STAG 10u
#define IWARP_SIW_OP_REG_MR 11u
/* enum siw_wc_status, */
#define IWARP_SIW_WC_SUCCESS 0u
#define IWARP_SIW_WC_LOC_PROT_ERR 2u
#define IWARP_SIW_WC_WR_FLUSH_ERR 4u
#define IWARP_SIW_WC_GENERAL_ERR 9u
/* enum siw_notify_flags. */
#define IWARP_SIW_NOTIFY_NOT 0u
#define IWARP_SIW_NOTIFY_SOLICITED 1u
#define IWARP_SIW_NOTIFY_NEXT_COMPLETION 2u
/* A QP's counters, as `rdma resource show qp -dd` prints them (octets). */
struct iwarp_ib_qp_counters {
	u64 sent_zero_copy;
	u64 sent_copied;
	u64 placed_in_order;
	u64 placed_out_of_order;
};
/* What ib_create_qp() asks for (struct ib_qp_init_attr); Rust answers the caps it gives. */
struct iwarp_ib_qp_attr {
	u32 pd;
	void *send_cq;
	void *recv_cq;
	bool rc;
	bool srq;
	bool sq_sig_all;
	u32 max_send_wr;
	u32 max_recv_wr;
	u32 max_send_sge;
	u32 max_recv_sge;
	u32 max_inline;
	u32 state;
	/* The QP's number (create_qp answers it). */
	u32 qpn;
	/* A user process's QP (through uverbs): create_qp answers its rings to map. */
	bool user;
	struct iwarp_mapped_ring sq;
	struct iwarp_mapped_ring rq;
};
/* iw_cm's events (enum iw_cm_event_type) */
#define IWARP_IW_CONNECT_REQUEST 1u
#define IWARP_IW_CONNECT_REPLY 2u
#define IWARP_IW_ESTABLISHED 3u
#define IWARP_IW_DISCONNECT 4u
#define IWARP_IW_CLOSE 5u
struct iw_cm_id;
/* What iw_cm asks of a connection (struct iw_cm_conn_param) and its cm_id's addresses. */
struct iwarp_iw_param {
	u32 qpn;
	u32 ird;
	u32 ord;
	const u8 *private_data;
	u32 private_len;
	struct iwarp_endpoint local;
	struct iwarp_endpoint remote;
	/* Listening: IPv6 connections only (rdma_cm's afonly); the netdev a wildcard binds to. */
	bool afonly;
	int ifindex;
};
/* An event for iw_cm (struct iw_cm_event); the private data is copied by iw_cm. */
struct iwarp_iw_event {
	u32 event;
	int status;
	struct iwarp_endpoint local;
	struct iwarp_endpoint remote;
	const u8 *private_data;
	u32 private_len;
	void *provider_data;
	u32 ird;
	u32 ord;
};
/* Rust's side of the verbs; each returns 0 or a negative errno unless it says otherwise. */
struct iwarp_ib_verbs {
	int (*alloc_pd)(void *dev, u32 *pd);
	int (*dealloc_pd)(void *dev, u32 pd);
	/* A region of all kernel memory (get_dma_mr) in @pd with access flags @access. */
	int (*dma_mr)(void *dev, u32 pd, int access, u32 *stag);
	/* A user process's buffer [@start, @start + @len) pinned, named from @iova on (reg_user_mr). */
	int (*user_mr)(void *dev, u32 pd, u64 start, u64 len, u64 iova, int access, u32 *stag);
	int (*dereg_mr)(void *dev, u32 stag);
	/* A region for fast registrations of up to @max_pages kernel pages (alloc_mr) in @pd. */
	int (*alloc_mr)(void *dev, u32 pd, u32 max_pages, u32 *stag);
	/*
	 * map_mr_sg: @n kernel pages of @page_size octets at @pages (kernel virtual addresses)
	 * hold @length octets from @iova on, for the next IB_WR_REG_MR of the region in @stag's slot.
	 */
	int (*map_mr)(void *dev, u32 stag, u64 iova, u64 length, u32 page_size, const u64 *pages, u32 n);
	/* A CQ of at least @entries for @ibcq: its Rust pointer in *@cq, its size in *@entries. */
	/* A user process's CQ if @ring is not NULL: Rust answers its ring to map there. */
	int (*create_cq)(void *dev, struct ib_cq *ibcq, u32 *entries, struct iwarp_mapped_ring *ring, void **cq);
	void (*destroy_cq)(void *cq);
	/* Completions taken (up to @n), or a negative errno. */
	int (*poll_cq)(void *cq, struct iwarp_ib_wc *wc, int n);
	/* 1 if completions are waiting and @flags asked to hear of them (REPORT_MISSED_EVENTS). */
	int (*req_notify_cq)(void *cq, u32 flags);
	int (*create_qp)(void *dev, struct ib_qp *ibqp, struct iwarp_ib_qp_attr *attr, void **qp);
	int (*modify_qp)(void *qp, u32 mask, u32 state);
	int (*query_qp)(void *qp, struct iwarp_ib_qp_attr *attr);
	void (*qp_counters)(void *qp, struct iwarp_ib_qp_counters *counters);
	/* destroy_qp: ends the QP (iw_cm may still modify it), then, once iw_cm let it go, frees it. */
	void (*end_qp)(void *qp);
	void (*destroy_qp)(void *qp);
	int (*post_send)(void *qp, const struct iwarp_ib_send_wr *wr);
	/* A user QP's doorbell (post_send with no requests): take what its send ring holds. */
	int (*doorbell)(void *qp);
	int (*post_recv)(void *qp, const struct iwarp_ib_recv_wr *wr);
	/* Hands the send requests posted to @qp, and the receives held, over to the engine (process context). */
	void (*hand_over)(void *qp);
	/* The device is gone (its dealloc_driver): drop @dev. */
	void (*dev_free)(void *dev);
	/* Drops the reference of an iwarp_mapped_ring's @rust. */
	void (*ring_put)(void *ring);
	/* The MPA options (IWARP_MPA_*) the connections iw_cm makes on @dev ask for from now on. */
	u32 (*dev_mpa)(void *dev);
	void (*dev_set_mpa)(void *dev, u32 option, bool on);
	/* iw_cm: the RDMA core's QP numbered @qpn, or NULL (atomic context: no sleeping). */
	struct ib_qp *(*iw_get_qp)(void *dev, u32 qpn);
	int (*iw_connect)(void *dev, struct iw_cm_id *id, const struct iwarp_iw_param *p);
	int (*iw_accept)(void *dev, struct iw_cm_id *id, void *pending, const struct iwarp_iw_param *p);
	int (*iw_reject)(void *dev, void *pending, const u8 *private_data, u32 private_len);
	/* A listener for @id on @p->local; its Rust pointer in *@listener. */
	int (*iw_listen)(void *dev, struct iw_cm_id *id, const struct iwarp_iw_param *p, u32 backlog, void **listener);
	void (*iw_unlisten)(void *listener);
};
/* Whether locks that only disable bottom halves may be taken: no hard interrupt, IRQs on. */
bool iwarp_shim_bh_locks_allowed(void);
/* Runs @qp's hand_over in a work item (any context): at once if @later_ms is 0, else that
 * many milliseconds on (at least a tick). */
void iwarp_shim_ib_qp_kick(struct ib_qp *qp, unsigned int later_ms);
/* Waits until @qp's hand_over has run, and stops it running again (destroy_qp). */
void iwarp_shim_ib_qp_settle(struct ib_qp *qp);
/* Calls @ibcq's completion handler (the consumer's), if it has one, soon (in softirq context). */
void iwarp_shim_ib_cq_notify(struct ib_cq *ibcq);
/*
 * Calls a user CQ's completion handler now, under the caller's locks: uverbs' handler only queues
 * an event on the process's channel and wakes it (any context), never calling back.
 */
void iwarp_shim_ib_cq_notify_user(struct ib_cq *ibcq);
/* Calls @ibcq's event handler (the consumer's), if it has one, with CQ_ERR, soon (likewise). */
void iwarp_shim_ib_cq_overflowed(struct ib_cq *ibcq);
/* Calls @qp's event handler (the consumer's), if it has one, with @event, now. */
void iwarp_shim_ib_qp_event(struct ib_qp *qp, u32 event);
/* Hands @ev to @id's iw_cm (any context; it never calls back): 0 or -ENOMEM (not queued). */
int iwarp_shim_iw_event(struct iw_cm_id *id, const struct iwarp_iw_event *ev);
/* Takes (@get) or drops a reference to @id. */
void iwarp_shim_iw_ref(struct iw_cm_id *id, bool get);
/* The workqueue connection work runs on (drained before the module goes). */
struct workqueue_struct *iwarp_shim_cm_wq(void);
int iwarp_shim_ib_register(const struct iwarp_ib_callbacks *cb, const struct iwarp_ib_verbs *verbs,
			   const struct iwarp_ib_limits *limits);
void iwarp_shim_ib_unregister(void);
void iwarp_shim_ib_done(void);
bool iwarp_shim_netdev_is_ethernet(const struct net_device *ndev);
/* A device on @ndev whose verbs Rust answers with @rust (freed by verbs->dev_free once made). */
struct ib_device *iwarp_shim_ib_device_create(struct net_device *ndev, void *rust);
int iwarp_shim_ib_device_register(struct ib_device *dev, const char *name);
void iwarp_shim_ib_device_free(struct ib_device *dev);
void iwarp_shim_ib_device_hold(struct ib_device *dev);
void iwarp_shim_ib_device_drop(struct ib_device *dev);
void iwarp_shim_ib_device_unregister_and_drop(struct ib_device *dev);
bool iwarp_shim_ib_device_unregister_queued(struct ib_device *dev);
void iwarp_shim_ib_port_event(struct ib_device *dev, bool active);

/* siw_guard_shim.c (C only): siw.ko and our devices, never both (see there). */
int iwarp_siw_guard_start(void);
void iwarp_siw_guard_stop(void);
int iwarp_siw_guard_claim(void);
void iwarp_siw_guard_release(void);

#endif
