/* SPDX-License-Identifier: GPL-2.0 */
/* The C shim's functions; their Rust declarations are in src/shim.rs. */
#ifndef IWARP_NET_SHIM_H
#define IWARP_NET_SHIM_H

#include <linux/types.h>

u32 iwarp_shim_crc32c(u32 crc, const void *p, size_t len);
int iwarp_shim_tcp_probe(u16 *port, u32 *write_seq);

struct socket;
struct socket *iwarp_shim_sock_adopt(int fd, int *err);
struct socket *iwarp_shim_sock_connect(u32 addr, u16 port, unsigned int timeout_ms, int *err);
struct socket *iwarp_shim_sock_listen(u32 addr, u16 *port, int backlog, int *err);
struct socket *iwarp_shim_sock_accept(struct socket *listener, unsigned int timeout_ms, u32 *addr, u16 *port, int *err);
void iwarp_shim_sock_put(struct socket *sock);
int iwarp_shim_sock_send_all(struct socket *sock, const void *buf, size_t len);
struct kvec;
struct bio_vec;
long iwarp_shim_sock_send_pages(struct socket *sock, struct bio_vec *bv, size_t n, size_t len, u32 *end_seq);
u32 iwarp_shim_sock_snd_una(struct socket *sock);
void iwarp_shim_sock_watch_acks(struct socket *sock, u32 goal);
u32 iwarp_shim_sock_mss(struct socket *sock);
int iwarp_shim_sock_recv_exact(struct socket *sock, void *buf, size_t len, unsigned int timeout_ms);

void iwarp_shim_sock_shutdown(struct socket *sock);
bool iwarp_shim_sock_established(struct socket *sock);
struct iwarp_hook;
struct iwarp_hook *iwarp_shim_hook_install(struct socket *sock, void *owner, void (*run)(void *), void (*run_tx)(void *), int *err);
void iwarp_shim_sock_kick_tx(struct socket *sock);
void iwarp_shim_hook_remove(struct iwarp_hook *h);
int iwarp_shim_sock_read(struct socket *sock, void *ctx,
			 long (*fn)(void *ctx, const struct kvec *parts, size_t n, bool capped),
			 struct kvec *parts, size_t cap);

#endif
