/* SPDX-License-Identifier: MIT */
/*
 * own_ns.h - run the rest of a test program in namespaces of its own.
 *
 * `vrangectl purge` without --pid and `vrangectl coordinate` reach every
 * process of the user that /proc shows (vrangectl scans it), and the
 * coordinator's address is an abstract socket, one per network namespace:
 * while one listens, the monitors of every process of the user in that
 * namespace leave library files to it.  A test that runs either must not
 * touch processes outside itself - another test run, a soak of the model
 * test, the user's own programs.  own_ns_enter() gives the caller a PID
 * namespace with its own /proc (mounted in a mount namespace of its own,
 * propagation private) and a network namespace:
 *
 *   the calling process P    unshares, forks C and waits for it; returns
 *                            1 with C's exit status in *status; it can
 *                            fork no more (a child would be born in the
 *                            ended namespace: ENOMEM), so it ends with
 *                            _exit() (LeakSanitizer's exit-time check,
 *                            which clones a tracer, would die on it)
 *   C, pid 1 there           mounts /proc, forks T, reaps every orphan
 *                            until T ends; exits with T's status, which
 *                            ends every process left in the namespace
 *   T, pid 2 there           returns 0: the test runs here
 *
 * C and T die with P (PR_SET_PDEATHSIG), so a time-out that kills P ends
 * the namespace too.  Call it before the library's first use and before
 * any thread exists.  Where it cannot be done (not root, unshare refused)
 * it returns -errno in the calling process and *why says what was refused:
 * the caller skips what would reach outside, with that reason printed (the
 * process may then be in a mount and a network namespace of its own, which
 * only narrows its reach further).  Only a failed mount of /proc after the
 * PID namespace was made (or a failed fork into it) ends the program (status 1, said on stderr).
 */
#ifndef VRANGE_TEST_OWN_NS_H
#define VRANGE_TEST_OWN_NS_H

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* The calling process's pid, as the machine sees it: names made outside
 * the namespace (cgroups, files in /tmp) take it, since pids inside are
 * small numbers every run of the test shares. */
static pid_t own_ns_tag_pid;

static __attribute__((unused)) int own_ns_tag(void)
{
	return (int)(own_ns_tag_pid ? own_ns_tag_pid : getpid());
}

static int own_ns_status(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* C: pid 1 of the namespace.  Never returns, except in T (0). */
static int own_ns_init(int ready_fd)
{
	int st, tst = 1;
	pid_t t, w;
	char ok = 1;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		ok = 0;
	if (write(ready_fd, &ok, 1) != 1 || !ok)
		_exit(1);
	close(ready_fd);
	t = fork();
	if (t < 0)
		_exit(1);
	if (t == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		return 0;
	}
	for (;;) {
		w = waitpid(-1, &st, 0);
		if (w == t)
			tst = own_ns_status(st);
		if (w == t || (w < 0 && errno != EINTR))
			break;
	}
	_exit(tst);
}

static int own_ns_enter(const char **why, int *status)
{
	int p[2], st, r;
	pid_t c;
	char ok = 0;

	*why = "";
	own_ns_tag_pid = getpid();
	if (geteuid() != 0) {
		*why = "needs root (unshare of PID, mount and network namespaces)";
		return -EPERM;
	}
	if (pipe(p) < 0) {
		*why = "pipe";
		return -errno;
	}
	/* The PID namespace last: once it is unshared, the next child is
	 * its init, so nothing may fail between that and the fork. */
	if (unshare(CLONE_NEWNS | CLONE_NEWNET) < 0) {
		r = -errno;
		*why = "unshare(CLONE_NEWNS | CLONE_NEWNET) refused";
		goto fail;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		r = -errno;
		*why = "making / private in the new mount namespace refused";
		goto fail;
	}
	if (unshare(CLONE_NEWPID) < 0) {
		r = -errno;
		*why = "unshare(CLONE_NEWPID) refused";
		goto fail;
	}
	fflush(NULL);
	c = fork();
	if (c < 0) {
		perror("own_ns: fork into the new PID namespace");
		exit(1);
	}
	if (c == 0) {
		close(p[0]);
		return own_ns_init(p[1]);
	}
	close(p[1]);
	if (read(p[0], &ok, 1) != 1 || !ok) {
		/* Its init is gone (or has no /proc of its own): this process
		 * can fork no more, so it cannot fall back either. */
		fprintf(stderr, "own_ns: mounting /proc in the new PID namespace failed\n");
		waitpid(c, NULL, 0);
		exit(1);
	}
	close(p[0]);
	while (waitpid(c, &st, 0) < 0)
		if (errno != EINTR)
			exit(1);
	*status = own_ns_status(st);
	return 1;
fail:
	close(p[0]);
	close(p[1]);
	return r;
}

#endif
