/* SPDX-License-Identifier: MIT */
/*
 * test_lazy_region.c - a region that nobody else holds costs what its memfd
 * costs, and its state becomes every holder's the moment it can be reached:
 * the fd handed out and adopted elsewhere, fork (also when the state could
 * not move at fork), an fd found through /proc, and the transition itself
 * racing marks and purges.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <vrange.h>

#include "fd_pass.h"
#include "test_main.h"

static size_t ps;

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own */
}

/* The region's file, looked at through /proc/self/map_files (no fd of
 * the library's is asked for): 1 if it carries the shared-state
 * attribute, 0 if not. */
static int has_attr(vrange_region *r)
{
	char path[96], buf[512];
	uintptr_t b = (uintptr_t)vrange_region_base(r);

	snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", (unsigned long)b,
		 (unsigned long)(b + vrange_region_size(r)));
	if (getxattr(path, "user.vrange", buf, sizeof(buf)) >= 0)
		return 1;
	ck_assert_int_eq(errno, ENODATA);
	return 0;
}

static int send_fd(int sock, int fd)
{
	char b = 0;

	return fd_pass_send(sock, &b, 1, fd);
}

/* One message; its descriptor or -1 (and -2 when nothing arrived). */
static int recv_fd(int sock)
{
	char b;
	int fd;

	return fd_pass_recv(sock, &b, 1, &fd) == 1 ? fd : -2;
}

static void step(int sock)
{
	ck_assert_int_eq(send_fd(sock, -1), 0);
}

static void await(int sock)
{
	ck_assert_int_eq(recv_fd(sock), -1);
}

/* A child's check: exit with the line that failed. */
#define CHILD_CHECK(x)                                                         \
	do {                                                                   \
		if (!(x))                                                      \
			_exit(__LINE__ % 250 + 1);                             \
	} while (0)

static void reap_ok(pid_t pid)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "child failed: status 0x%x (exit code = line %% 250 + 1)", st);
}

/* A private region: one descriptor, one mapping, no attribute. */
START_TEST(private_region_is_one_fd)
{
	vrange_region *r[8], *first;
	int before;

	/* The first region starts the library: its pool, its publication,
	 * its userfaultfd. */
	ck_assert_int_eq(vrange_region_create("first", 16 * ps, 0, &first), 0);
	before = open_fds();
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(vrange_region_create("lazy", 16 * ps, 0, &r[i]), 0);
	ck_assert_int_eq(open_fds() - before, 8);
	ck_assert_int_eq(has_attr(r[0]), 0);
	ck_assert_int_eq(vrange_mark_volatile(r[0], 0, 4 * ps), 0);
	ck_assert_int_eq(vrange_is_volatile(r[0], 0, ps), 1);
	ck_assert_int_ge(vrange_region_purge(r[0]), 0);
	ck_assert_int_eq(vrange_mark_nonvolatile(r[0], 0, 4 * ps), VRANGE_PURGED);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(vrange_region_destroy(r[i]), 0);
	ck_assert_int_eq(open_fds(), before);
	ck_assert_int_eq(vrange_region_destroy(first), 0);
}
END_TEST

/*
 * The pool's reservation is open only as far as its file reaches: a sweep
 * of readable memory (a core dump, valgrind's leak scan) must not meet a
 * SIGBUS on every page of the rest.
 */
START_TEST(pool_reservation_beyond_file_is_closed)
{
	vrange_region *r;
	char line[512], path[64];
	unsigned long start, end, off;
	char perms[5];
	int seen = 0;
	FILE *maps;

	ck_assert_int_eq(vrange_region_create("pool", 16 * ps, 0, &r), 0);
	maps = fopen("/proc/self/maps", "r");
	ck_assert_ptr_nonnull(maps);
	while (fgets(line, sizeof(line), maps)) {
		struct stat st;

		if (!strstr(line, "vrange-pool") ||
		    sscanf(line, "%lx-%lx %4s %lx", &start, &end, perms, &off) != 4)
			continue;
		seen++;
		if (perms[0] != 'r')
			continue;
		snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx",
			 start, end);
		if (stat(path, &st) < 0) {
			fprintf(stderr, "SKIP size check: %s: %s\n", path,
				strerror(errno));
			continue;
		}
		ck_assert_msg(off + (end - start) <= (unsigned long)st.st_size,
			      "readable pool bytes %lx-%lx (offset %lu) beyond "
			      "its file of %lld bytes", start, end, off,
			      (long long)st.st_size);
	}
	fclose(maps);
	ck_assert_int_ge(seen, 1);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
}
END_TEST

/*
 * The fd handed out, adopted by a process that had no part in creating
 * the region: it finds the state as it was (volatile, purged), its marks
 * are the creator's, the creator's purge is its.
 */
START_TEST(handed_out_then_adopted)
{
	vrange_region *r;
	int sv[2], fd;
	pid_t pid;
	char *b;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		vrange_region *a;
		int afd;

		alarm(30);
		close(sv[0]);
		afd = recv_fd(sv[1]);
		CHILD_CHECK(afd >= 0);
		CHILD_CHECK(vrange_region_adopt(afd, VRANGE_ACCESS_ZERO, &a) == 0);
		CHILD_CHECK(vrange_is_volatile(a, 0, 4 * ps) == 1);
		CHILD_CHECK(vrange_is_volatile(a, 6 * ps, 2 * ps) == 0);
		CHILD_CHECK(vrange_mark_nonvolatile(a, 0, ps) == VRANGE_PURGED);
		CHILD_CHECK(vrange_mark_nonvolatile(a, 4 * ps, ps) == VRANGE_INTACT);
		CHILD_CHECK(((char *)vrange_region_base(a))[4 * ps] == 0x11);
		CHILD_CHECK(vrange_mark_volatile(a, 6 * ps, 2 * ps) == 0);
		step(sv[1]);
		await(sv[1]);
		CHILD_CHECK(vrange_mark_nonvolatile(a, 6 * ps, 2 * ps) == VRANGE_PURGED);
		CHILD_CHECK(vrange_region_destroy(a) == 0);
		_exit(0);
	}
	close(sv[1]);
	ck_assert_int_eq(vrange_region_create("handed", 8 * ps, VRANGE_ACCESS_ZERO, &r), 0);
	b = vrange_region_base(r);
	memset(b, 0x11, 8 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	ck_assert_int_eq(vrange_region_purge(r), (ssize_t)(4 * ps));
	ck_assert_int_eq(vrange_mark_volatile(r, 4 * ps, 2 * ps), 0);
	ck_assert_int_eq(has_attr(r), 0);
	fd = vrange_region_fd(r);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(has_attr(r), 1);
	ck_assert_int_eq(vrange_region_fd(r), fd);
	ck_assert_int_eq(send_fd(sv[0], fd), 0);
	await(sv[0]);
	/* The child's marks are the file's. */
	ck_assert_int_eq(vrange_is_volatile(r, 6 * ps, 2 * ps), 1);
	ck_assert_int_eq(vrange_is_volatile(r, 4 * ps, ps), 0);
	ck_assert_int_ge(vrange_region_purge(r), (ssize_t)(2 * ps));
	step(sv[0]);
	reap_ok(pid);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 8 * ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	close(sv[0]);
}
END_TEST

/* fork: the child shares the parent's state, both ways. */
START_TEST(fork_shares_state)
{
	vrange_region *r;
	int sv[2];
	pid_t pid;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(vrange_region_create("forked", 8 * ps, VRANGE_ACCESS_ZERO, &r), 0);
	memset(vrange_region_base(r), 0x22, 8 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 4 * ps), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		alarm(30);
		CHILD_CHECK(vrange_is_volatile(r, 0, 4 * ps) == 1);
		CHILD_CHECK(vrange_is_volatile(r, 4 * ps, 4 * ps) == 0);
		CHILD_CHECK(vrange_mark_volatile(r, 4 * ps, 2 * ps) == 0);
		step(sv[1]);
		await(sv[1]);
		CHILD_CHECK(vrange_mark_nonvolatile(r, 4 * ps, 2 * ps) == VRANGE_PURGED);
		CHILD_CHECK(vrange_mark_nonvolatile(r, 6 * ps, 2 * ps) == VRANGE_INTACT);
		CHILD_CHECK(((char *)vrange_region_base(r))[7 * ps] == 0x22);
		_exit(0);
	}
	await(sv[0]);
	ck_assert_int_eq(vrange_is_volatile(r, 4 * ps, 2 * ps), 1);
	ck_assert_int_eq(vrange_region_purge(r), (ssize_t)(6 * ps));
	step(sv[0]);
	reap_ok(pid);
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 4 * ps), VRANGE_PURGED);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
}
END_TEST

/*
 * fork where the state cannot move (no descriptor left for its metadata):
 * parent and child share its pool slot; when the parent later hands the fd
 * out, the state moves and the child follows it.
 */
START_TEST(fork_without_descriptors_shares_the_slot)
{
	struct rlimit rl, tight;
	vrange_region *r;
	int sv[2], probe;
	pid_t pid;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(vrange_region_create("tight", 8 * ps, VRANGE_ACCESS_ZERO, &r), 0);
	memset(vrange_region_base(r), 0x33, 8 * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 0, 2 * ps), 0);
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	probe = dup(0);
	ck_assert_int_ge(probe, 0);
	close(probe);
	tight = rl;
	tight.rlim_cur = (rlim_t)probe; /* no new descriptor at all */
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &tight), 0);
	pid = fork();
	if (pid == 0)
		setrlimit(RLIMIT_NOFILE, &rl);
	else
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		alarm(30);
		CHILD_CHECK(has_attr(r) == 0); /* nothing moved at fork */
		CHILD_CHECK(vrange_is_volatile(r, 0, 2 * ps) == 1);
		CHILD_CHECK(vrange_mark_volatile(r, 2 * ps, 2 * ps) == 0);
		step(sv[1]);
		await(sv[1]);
		/* The parent moved the state: this call follows it. */
		CHILD_CHECK(vrange_is_volatile(r, 5 * ps, ps) == 1);
		CHILD_CHECK(vrange_mark_nonvolatile(r, 0, 8 * ps) == VRANGE_INTACT);
		step(sv[1]);
		_exit(0);
	}
	ck_assert_int_eq(has_attr(r), 0);
	await(sv[0]);
	ck_assert_int_eq(vrange_is_volatile(r, 2 * ps, 2 * ps), 1);
	ck_assert_int_ge(vrange_region_fd(r), 0);
	ck_assert_int_eq(has_attr(r), 1);
	ck_assert_int_eq(vrange_mark_volatile(r, 5 * ps, ps), 0);
	step(sv[0]);
	await(sv[0]);
	ck_assert_int_eq(vrange_is_volatile(r, 0, 8 * ps), 0);
	reap_ok(pid);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
}
END_TEST

/* An fd of the region found behind the library's back, used in this
 * process: the state it reaches is the region's (and is now shareable). */
START_TEST(fd_from_proc_is_the_region)
{
	vrange_region *r;
	char path[96];
	uintptr_t b;
	int fd;

	ck_assert_int_eq(vrange_region_create("proc", 4 * ps, VRANGE_ACCESS_ZERO, &r), 0);
	b = (uintptr_t)vrange_region_base(r);
	ck_assert_int_eq(vrange_mark_volatile(r, ps, ps), 0);
	snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", (unsigned long)b,
		 (unsigned long)(b + 4 * ps));
	fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, ps, ps), 1);
	ck_assert_int_eq(has_attr(r), 1);
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 3 * ps, ps), 0);
	ck_assert_int_eq(vrange_is_volatile(r, 3 * ps, ps), 1);
	close(fd);
	/* The region outlives the descriptor the library took. */
	ck_assert_int_eq(vrange_mark_nonvolatile(r, 0, 4 * ps), VRANGE_INTACT);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	ck_assert_int_eq(vrange_fd_forget(fd), -EBADF);
}
END_TEST

/*
 * The move itself racing a marker (checks every INTACT page's bytes) and a
 * purger: INTACT is never wrong before, during or after it.
 */
struct race {
	vrange_region *r;
	_Atomic int stop;
	unsigned long violations, intact, purged, errors;
};

/* Keeps a window of pages volatile (so purges find some), unmarks the
 * oldest of them and checks its bytes when it is INTACT. */
static void *marker(void *arg)
{
	struct race *c = arg;
	char *b = vrange_region_base(c->r);
	size_t pages = vrange_region_size(c->r) / ps, win = pages / 2;
	unsigned char val[64] = { 0 }, v = 1;

	for (size_t k = 0; !atomic_load(&c->stop) || k % pages; k++) {
		size_t p = k % pages, q = (k + pages - win) % pages;
		int ret;

		v = (unsigned char)(v % 250 + 1);
		memset(b + p * ps, v, ps);
		val[p] = v;
		if (vrange_mark_volatile(c->r, p * ps, ps) < 0)
			c->errors++;
		if (k < win)
			continue;
		ret = vrange_mark_nonvolatile(c->r, q * ps, ps);
		if (ret == VRANGE_INTACT) {
			c->intact++;
			for (size_t i = 0; i < ps; i += 512)
				if ((unsigned char)b[q * ps + i] != val[q])
					c->violations++;
		} else if (ret == VRANGE_PURGED) {
			c->purged++;
		} else {
			c->errors++;
		}
	}
	return NULL;
}

static void *purger(void *arg)
{
	struct race *c = arg;

	/* A breath between passes: under valgrind's one-thread-at-a-time
	 * scheduling the marker must still get on. */
	while (!atomic_load(&c->stop)) {
		vrange_purge(SIZE_MAX);
		usleep(50);
	}
	return NULL;
}

START_TEST(move_races_marks_and_purges)
{
	int rounds = test_quick() ? 3 : 40;
	unsigned long intact = 0, purged = 0;

	for (int i = 0; i < rounds; i++) {
		struct race c = { 0 };
		pthread_t m, p;

		ck_assert_int_eq(vrange_region_create("race", 8 * ps, VRANGE_ACCESS_ZERO, &c.r), 0);
		ck_assert_int_eq(pthread_create(&m, NULL, marker, &c), 0);
		ck_assert_int_eq(pthread_create(&p, NULL, purger, &c), 0);
		usleep(2000);
		ck_assert_int_ge(vrange_region_fd(c.r), 0);
		usleep(2000);
		atomic_store(&c.stop, 1);
		pthread_join(m, NULL);
		pthread_join(p, NULL);
		ck_assert_msg(c.violations == 0, "%lu INTACT pages lost bytes", c.violations);
		ck_assert_msg(c.errors == 0, "%lu calls failed", c.errors);
		intact += c.intact;
		purged += c.purged;
		ck_assert_int_eq(vrange_region_destroy(c.r), 0);
	}
	fprintf(stderr, "move race: %lu intact, %lu purged\n", intact, purged);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("lazy-region");
	TCase *tc = tcase_create("transitions");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, private_region_is_one_fd);
	tcase_add_test(tc, pool_reservation_beyond_file_is_closed);
	tcase_add_test(tc, handed_out_then_adopted);
	tcase_add_test(tc, fork_shares_state);
	tcase_add_test(tc, fork_without_descriptors_shares_the_slot);
	tcase_add_test(tc, fd_from_proc_is_the_region);
	tcase_add_test(tc, move_races_marks_and_purges);
	suite_add_tcase(s, tc);
	return s;
}
