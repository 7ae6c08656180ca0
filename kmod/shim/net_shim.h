/* SPDX-License-Identifier: GPL-2.0 */
/* The C shim's functions; their Rust declarations are in src/shim.rs. */
#ifndef IWARP_NET_SHIM_H
#define IWARP_NET_SHIM_H

#include <linux/types.h>

u32 iwarp_shim_crc32c(u32 crc, const void *p, size_t len);
int iwarp_shim_tcp_probe(u16 *port, u32 *write_seq);

#endif
