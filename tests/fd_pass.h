/* SPDX-License-Identifier: MIT */
/*
 * fd_pass.h - one message over a Unix socket carrying at most one
 * descriptor (SCM_RIGHTS): how the multi-process tests hand files to
 * their peers.
 */
#ifndef VRANGE_TEST_FD_PASS_H
#define VRANGE_TEST_FD_PASS_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Send len bytes of buf, and fd unless it is negative: 0, or -1 when the
 * message did not go whole (a peer that is gone is -1, not SIGPIPE). */
static inline int fd_pass_send(int sock, const void *buf, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(ctl.buf, 0, sizeof(ctl.buf));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* Receive one message into buf: its length (0 at end of stream, -1 on
 * error); *fd is the descriptor it carried (close-on-exec) or -1. */
static inline ssize_t fd_pass_recv(int sock, void *buf, size_t len, int *fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	ssize_t n;

	*fd = -1;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); n > 0 && c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	return n;
}

#endif
