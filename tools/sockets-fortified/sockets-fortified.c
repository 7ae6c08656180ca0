// SPDX-License-Identifier: GPL-2.0
/*
 * A reader built as Debian builds its programs (-O2 -D_FORTIFY_SOURCE=2): with sizes the
 * compiler cannot see, its read, recv and poll become the C library's __read_chk, __recv_chk
 * and __poll_chk, which the sockets preload library must catch as it catches read, recv and
 * poll (they would otherwise read the upgraded descriptor's eventfd itself).
 *
 * Usage: sockets-fortified HOST PORT CHUNK: connects, copies the stream to stdout, reading at
 * most CHUNK octets at a time (alternately with read and recv, each after poll), until EOF.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	char buf[65536];
	struct pollfd p[1];
	nfds_t n = (nfds_t)(argc - 3); /* 1, but not a constant the compiler sees */
	size_t chunk;
	long total = 0;
	int fd, turn = 0;

	if (argc != 4 || inet_pton(AF_INET, argv[1], &sin.sin_addr) != 1)
		return fprintf(stderr, "usage: sockets-fortified HOST PORT CHUNK\n"), 2;
	sin.sin_port = htons(atoi(argv[2]));
	/* Not bounded here: bounding it would let the compiler prove the reads safe and call read
	 * and recv themselves; above sizeof(buf), the fortified calls abort the program. */
	chunk = strtoul(argv[3], NULL, 0);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0)
		return perror("connect"), 1;
	for (;;) {
		ssize_t got;

		p[0].fd = fd;
		p[0].events = POLLIN;
		if (poll(p, n, 30000) != 1)
			return fprintf(stderr, "poll: nothing to read within 30 s\n"), 1;
		got = turn++ & 1 ? recv(fd, buf, chunk, 0) : read(fd, buf, chunk);
		if (got < 0)
			return perror("read"), 1;
		if (got == 0)
			break;
		if (fwrite(buf, 1, got, stdout) != (size_t)got)
			return perror("fwrite"), 1;
		total += got;
	}
	fprintf(stderr, "sockets-fortified: read %ld octets\n", total);
	return fflush(stdout) != 0;
}
