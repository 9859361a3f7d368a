/* SPDX-License-Identifier: MIT */
/*
 * test_file_state.c - state belongs to the file, not to a mapping of it
 * (contract 1 and 5: "Unmapping a shared-file mapping leaves the file's
 * state as it was"), and the library still lets a file go once it is gone.
 *
 * Defect D9 of the model test: a file marked through an application
 * MAP_SHARED mapping, purged and unmapped kept its state only until the
 * next sweep of orphan files, which took a memfd the application still held
 * for unreachable (its memfd_create descriptor counts nowhere a lease sees)
 * and dropped the state - purged pages and all: a later unmark through the
 * file layer said VRANGE_INTACT over zeros.
 *
 * Each case runs in its own forked process (CK_FORK).  Pages are written
 * before they are marked, so a purge certainly discards them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vrange.h>

#include "test_main.h"

static size_t ps;

static void setup(void)
{
	ps = (size_t)sysconf(_SC_PAGESIZE);
}

static struct vrange_stats stats(void)
{
	struct vrange_stats s;

	ck_assert_int_eq(vrange_get_stats(&s), 0);
	return s;
}

/* Every sweep of orphan files the library makes: stats calls sweep each
 * time, purge passes at most ten times a second. */
static void sweep(void)
{
	stats();
	usleep(120 * 1000);
	vrange_purge(1);
	stats();
}

static int memfd_named(const char *name, size_t npages)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(npages * ps)), 0);
	return fd;
}

static unsigned char *map_shared(int fd, size_t npages)
{
	void *p = mmap(NULL, npages * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	return p;
}

static int all_bytes(int fd, size_t off, size_t len, unsigned char b)
{
	unsigned char *buf = malloc(len);
	int ok = 1;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len);
	for (size_t i = 0; i < len && ok; i++)
		ok = buf[i] == b;
	free(buf);
	return ok;
}

/* How many of this process's descriptors name a memfd called name. */
static int fds_on(const char *name)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], target[256], want[128];
	int n = 0;

	ck_assert_ptr_nonnull(d);
	snprintf(want, sizeof(want), "/memfd:%s ", name);
	while ((e = readdir(d))) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = 0;
		n += strncmp(target, want, strlen(want)) == 0;
	}
	closedir(d);
	return n;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* What the library opens for good at its first use of each kind (the
 * userfaultfd, its reader, a /proc/self/maps descriptor, the anonymous
 * state, the watch of dormant files): opened before a count is taken. */
static void warm_up(void)
{
	int fd = memfd_named("warm", 1);
	unsigned char *a = map_shared(fd, 1);
	unsigned char *b = mmap(NULL, ps, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(b, MAP_FAILED);
	a[0] = b[0] = 1;
	ck_assert_int_eq(vrange(a, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange(b, ps, VRANGE_VOLATILE, NULL), 0);
	vrange_purge(SIZE_MAX);
	munmap(a, ps);
	munmap(b, ps);
	close(fd);
	sweep();
}

/*
 * D9 itself: marked through the application's mapping, purged, unmapped;
 * the application keeps only its memfd descriptor.  Sweeps later, the
 * file layer must still report the purge.
 */
START_TEST(purged_state_outlives_mapping)
{
	const size_t n = 4;
	int fd = memfd_named("d9-purged", n);
	unsigned char *a = map_shared(fd, n);

	memset(a, 'a', n * ps);
	ck_assert_int_eq(vrange(a, 2 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(munmap(a, n * ps), 0);
	sweep();
	ck_assert(all_bytes(fd, 0, 2 * ps, 0));
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(2 * ps)), 1);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(2 * ps)),
			 VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(n * ps)),
			 VRANGE_INTACT);
	ck_assert(all_bytes(fd, 2 * ps, 2 * ps, 'a'));
	close(fd);
}
END_TEST

/* Volatile, not purged, unmapped: still volatile, and still purgeable
 * once the file is used again. */
START_TEST(volatile_state_outlives_mapping)
{
	const size_t n = 4;
	int fd = memfd_named("d9-volatile", n);
	unsigned char *a = map_shared(fd, n);

	memset(a, 'v', n * ps);
	ck_assert_int_eq(vrange(a, 3 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(munmap(a, n * ps), 0);
	/* Sweeps without a purge: the application still holds the file (its
	 * descriptor), so the orphan stays purgeable - a purge would take
	 * the pages (orphan_purgeable_while_held). */
	stats();
	stats();
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 2 * ps, (off_t)ps), 1);
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 3 * ps, (off_t)ps), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)ps), VRANGE_INTACT);
	ck_assert(all_bytes(fd, 0, n * ps, 'v'));
	/* Marked through the file layer, which holds it from then on: the
	 * older volatile pages purge first. */
	ck_assert_int_eq(vrange_fd_mark_volatile(fd, 3 * ps, (off_t)ps), 0);
	ck_assert_int_eq(vrange_purge(2 * ps), (ssize_t)(2 * ps));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, ps, (off_t)(2 * ps)),
			 VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 3 * ps, (off_t)ps),
			 VRANGE_INTACT);
	ck_assert(all_bytes(fd, 3 * ps, ps, 'v'));
	close(fd);
}
END_TEST

/* A region's file, mapped by the application after the region went: the
 * state lives in the library's metadata, which must outlive the mapping
 * too (an adopter later attaches to it). */
START_TEST(library_file_state_outlives_mapping)
{
	const size_t n = 4;
	vrange_region *r = NULL, *again = NULL;
	unsigned char *a;
	int fd;

	ck_assert_int_eq(vrange_region_create("d9-lib", n * ps, VRANGE_ACCESS_ZERO, &r), 0);
	fd = dup(vrange_region_fd(r));
	ck_assert_int_ge(fd, 0);
	a = map_shared(fd, n);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	memset(a, 'l', n * ps);
	ck_assert_int_eq(vrange(a, 2 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(2 * ps));
	ck_assert_int_eq(munmap(a, n * ps), 0);
	sweep();
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &again), 0);
	ck_assert_int_eq(vrange_is_volatile(again, 0, 2 * ps), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(again, 0, n * ps), VRANGE_PURGED);
	ck_assert(all_bytes(fd, 2 * ps, 2 * ps, 'l'));
	vrange_region_destroy(again);
	close(fd);
}
END_TEST

/* The state is the file's in a fork child too (it inherited the fd). */
START_TEST(purged_state_outlives_mapping_in_child)
{
	const size_t n = 2;
	int fd = memfd_named("d9-fork", n), st;
	unsigned char *a = map_shared(fd, n);
	pid_t pid;

	memset(a, 'f', n * ps);
	ck_assert_int_eq(vrange(a, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(munmap(a, n * ps), 0);
	sweep();
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(n * ps)) ==
		      VRANGE_PURGED ? 0 : 1);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the child was told INTACT over a purged page");
	/* The state is shared with the child: its unmark is ours too (the
	 * purge was reported once, to the caller that unmarked first). */
	ck_assert_int_eq(vrange_fd_is_volatile(fd, 0, (off_t)(n * ps)), 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(n * ps)),
			 VRANGE_INTACT);
	close(fd);
}
END_TEST

/*
 * Issue 25, item 8: a region (SIGBUS mode where it can be had) whose
 * file the application maps itself, never passing that mapping to
 * vrange(); pages marked through vrange() on the region's address; the
 * region destroyed - the application's mapping keeps the file alive.
 * The state is the file's: still counted, and still purgeable (the
 * application writes through its mapping first: memory it offered).
 * Once the application lets the file go, the library keeps nothing.
 */
START_TEST(region_destroyed_state_stays_purgeable)
{
	const size_t n = 64, first = 8, nvol = 25;
	vrange_region *r = NULL;
	unsigned char *a, *b;
	struct vrange_stats s0, s1, s2;
	int before, fd, rc;

	warm_up();
	/* The first SIGBUS-mode region opens the fault thread's descriptor
	 * for good. */
	if (vrange_region_create("i8-warm", ps, VRANGE_ACCESS_SIGBUS, &r) == 0)
		vrange_region_destroy(r);
	before = fds_on("vrange-state");
	s0 = stats();
	rc = vrange_region_create("i8-region", n * ps, VRANGE_ACCESS_SIGBUS, &r);
	if (rc == -EOPNOTSUPP)
		rc = vrange_region_create("i8-region", n * ps, VRANGE_ACCESS_ZERO, &r);
	ck_assert_int_eq(rc, 0);
	fd = dup(vrange_region_fd(r));
	ck_assert_int_ge(fd, 0);
	a = map_shared(fd, n);
	b = vrange_region_base(r);
	memset(b, 'r', n * ps);
	ck_assert_int_eq(vrange(b + first * ps, nvol * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	memset(a + first * ps, 'w', nvol * ps);
	s1 = stats();
	ck_assert_uint_eq(s1.volatile_bytes, s0.volatile_bytes + nvol * ps);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(nvol * ps));
	s2 = stats();
	ck_assert_uint_eq(s2.volatile_bytes, s0.volatile_bytes + nvol * ps);
	ck_assert_uint_eq(s2.purged_bytes, s0.purged_bytes + nvol * ps);
	/* A mapping vrange() never saw reads zeros where a purge punched. */
	ck_assert(all_bytes(fd, first * ps, nvol * ps, 0));
	ck_assert(all_bytes(fd, 0, first * ps, 'r'));
	ck_assert(all_bytes(fd, (first + nvol) * ps, (n - first - nvol) * ps, 'r'));
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(n * ps)),
			 VRANGE_PURGED);
	ck_assert_int_eq(munmap(a, n * ps), 0);
	close(fd);
	sweep();
	/* Neither the file nor its state's metadata (without userfaultfd -
	 * valgrind - the library's inotify instance may be new here). */
	ck_assert_int_eq(fds_on("i8-region"), 0);
	ck_assert_int_eq(fds_on("vrange-state"), before);
}
END_TEST

/* The same with the pages purged before the destroy: a region adopting
 * the file later must hear VRANGE_PURGED, never INTACT over zeros. */
START_TEST(region_destroyed_purged_stays_purged)
{
	const size_t n = 16;
	vrange_region *r = NULL, *again = NULL;
	unsigned char *a;
	int fd;

	ck_assert_int_eq(vrange_region_create("i8-purged", n * ps, VRANGE_ACCESS_ZERO, &r), 0);
	fd = dup(vrange_region_fd(r));
	ck_assert_int_ge(fd, 0);
	a = map_shared(fd, n);
	memset(vrange_region_base(r), 'p', n * ps);
	ck_assert_int_eq(vrange_mark_volatile(r, 4 * ps, 4 * ps), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(4 * ps));
	ck_assert_int_eq(vrange_region_destroy(r), 0);
	sweep();
	ck_assert_int_eq(vrange_region_adopt(fd, VRANGE_ACCESS_ZERO, &again), 0);
	ck_assert_int_eq(vrange_is_volatile(again, 4 * ps, 4 * ps), 1);
	ck_assert_int_eq(vrange_mark_nonvolatile(again, 0, n * ps), VRANGE_PURGED);
	ck_assert(all_bytes(fd, 4 * ps, 4 * ps, 0));
	ck_assert(all_bytes(fd, 8 * ps, 8 * ps, 'p'));
	vrange_region_destroy(again);
	munmap(a, n * ps);
	close(fd);
}
END_TEST

/* Marked through the application's mapping, unmapped, the application
 * still holding the memfd: the volatile pages stay purgeable. */
START_TEST(orphan_purgeable_while_held)
{
	const size_t n = 4;
	int fd = memfd_named("i8-held", n);
	unsigned char *a = map_shared(fd, n);

	memset(a, 'h', n * ps);
	ck_assert_int_eq(vrange(a, 3 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(munmap(a, n * ps), 0);
	stats(); /* sweeps, without a purge */
	ck_assert_uint_ge(stats().volatile_bytes, 3 * ps);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(3 * ps));
	ck_assert(all_bytes(fd, 0, 3 * ps, 0));
	ck_assert(all_bytes(fd, 3 * ps, ps, 'h'));
	close(fd);
}
END_TEST

/*
 * A process that only makes regions - never vrange() on other memory, so
 * the any-mapping layer never starts - lets orphans go too.  Its sweeps
 * returned before they reached the orphans while that layer was not up:
 * every region destroyed after its fd went out kept the file and its
 * state's metadata open for good once the application closed its own
 * descriptor (two descriptors per region; the stress loop of issue 25,
 * item 9 ran out of speed on them).  One file purged before the close,
 * one still volatile.
 */
START_TEST(region_only_process_lets_orphans_go)
{
	const size_t n = 8;
	vrange_region *r = NULL;
	int before = fds_on("vrange-state"), fd[2];

	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(vrange_region_create("i8-let-go", n * ps,
						      VRANGE_ACCESS_ZERO, &r), 0);
		fd[i] = dup(vrange_region_fd(r));
		ck_assert_int_ge(fd[i], 0);
		memset(vrange_region_base(r), 'g', n * ps);
		ck_assert_int_eq(vrange_mark_volatile(r, 2 * ps, 4 * ps), 0);
		ck_assert_int_eq(vrange_region_destroy(r), 0);
		if (i == 0) {
			/* Held by fd[0]: kept with our descriptor, purgeable. */
			ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)(4 * ps));
			ck_assert(all_bytes(fd[0], 2 * ps, 4 * ps, 0));
			ck_assert(all_bytes(fd[0], 6 * ps, 2 * ps, 'g'));
		}
	}
	ck_assert_int_eq(fds_on("i8-let-go"), 2 + 2);
	close(fd[0]);
	close(fd[1]);
	sweep();
	ck_assert_int_eq(fds_on("i8-let-go"), 0);
	ck_assert_int_eq(fds_on("vrange-state"), before);
}
END_TEST

/* Gone for good (unmapped, closed): the library keeps nothing of it - no
 * descriptor of the file, none of its own for the state. */
START_TEST(released_when_file_gone)
{
	const size_t n = 4;
	int before, fd;
	unsigned char *a;

	warm_up();
	before = count_fds();
	fd = memfd_named("d9-gone", n);
	a = map_shared(fd, n);
	memset(a, 'g', n * ps);
	ck_assert_int_eq(vrange(a, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_eq(vrange(a + ps, 2 * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(ps), (ssize_t)ps); /* purged and volatile */
	ck_assert_int_eq(munmap(a, n * ps), 0);
	sweep();
	close(fd);
	sweep();
	ck_assert_int_eq(fds_on("d9-gone"), 0);
	ck_assert_int_eq(count_fds(), before);
	ck_assert_int_eq(stats().volatile_bytes, 0);
	ck_assert_int_eq(stats().purged_bytes, 0);
}
END_TEST

/* The same, for a file nobody held when it was unmapped: mapped, fd
 * closed at once, marked, purged, unmapped. */
START_TEST(released_when_unmapped_last)
{
	const size_t n = 2;
	int before, fd;
	unsigned char *a;

	warm_up();
	before = count_fds();
	fd = memfd_named("d9-last", n);
	a = map_shared(fd, n);
	close(fd);
	memset(a, 'z', n * ps);
	ck_assert_int_eq(vrange(a, n * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(ps), (ssize_t)ps);
	ck_assert_int_eq(munmap(a, n * ps), 0);
	sweep();
	ck_assert_int_eq(fds_on("d9-last"), 0);
	ck_assert_int_eq(count_fds(), before);
}
END_TEST

/* A /dev/shm file closed and unmapped but still named: reopened by its
 * name later, its state is there; unlinked and closed, it is let go. */
START_TEST(named_file_reopened)
{
	const size_t n = 2;
	char path[96], link[300], target[300];
	unsigned char *a;
	int fd, before;

	warm_up();
	before = count_fds();
	snprintf(path, sizeof(path), "/dev/shm/vrange-test-d9-%d", (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		TEST_SKIP("no /dev/shm here: %s", strerror(errno));
	ck_assert_int_eq(ftruncate(fd, (off_t)(n * ps)), 0);
	a = map_shared(fd, n);
	close(fd);
	memset(a, 'n', n * ps);
	ck_assert_int_eq(vrange(a, ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(SIZE_MAX), (ssize_t)ps);
	ck_assert_int_eq(munmap(a, n * ps), 0);
	sweep();
	fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(n * ps)), VRANGE_PURGED);
	ck_assert_int_eq(vrange_fd_mark_nonvolatile(fd, 0, (off_t)(n * ps)), VRANGE_INTACT);
	ck_assert(all_bytes(fd, ps, ps, 'n'));
	unlink(path);
	close(fd);
	sweep();
	ck_assert_int_eq(count_fds(), before);
	for (int i = 0; i < 1024; i++) {
		ssize_t len;

		snprintf(link, sizeof(link), "/proc/self/fd/%d", i);
		len = readlink(link, target, sizeof(target) - 1);
		if (len > 0) {
			target[len] = 0;
			ck_assert_msg(!strstr(target, "vrange-test-d9"),
				      "the library still holds %s", target);
		}
	}
}
END_TEST

/* Shared anonymous memory is a shared-memory object of its own (contract
 * 5): its state too is let go once its last mapping is gone. */
START_TEST(released_shared_anonymous)
{
	const size_t n = 2;
	int before;
	unsigned char *a;

	warm_up();
	before = count_fds();
	a = mmap(NULL, n * ps, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(a, MAP_FAILED);
	memset(a, 's', n * ps);
	ck_assert_int_eq(vrange(a, n * ps, VRANGE_VOLATILE, NULL), 0);
	ck_assert_int_ge(vrange_purge(ps), (ssize_t)ps);
	ck_assert_int_eq(munmap(a, n * ps), 0);
	sweep();
	ck_assert_int_eq(count_fds(), before);
	ck_assert_int_eq(stats().volatile_bytes, 0);
}
END_TEST

Suite *test_suite(void)
{
	Suite *s = suite_create("file-state");
	TCase *tc = tcase_create("outlives-mapping");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, purged_state_outlives_mapping);
	tcase_add_test(tc, volatile_state_outlives_mapping);
	tcase_add_test(tc, library_file_state_outlives_mapping);
	tcase_add_test(tc, purged_state_outlives_mapping_in_child);
	tcase_add_test(tc, released_when_file_gone);
	tcase_add_test(tc, released_when_unmapped_last);
	tcase_add_test(tc, released_shared_anonymous);
	tcase_add_test(tc, named_file_reopened);
	tcase_add_test(tc, region_destroyed_state_stays_purgeable);
	tcase_add_test(tc, region_destroyed_purged_stays_purged);
	tcase_add_test(tc, orphan_purgeable_while_held);
	tcase_add_test(tc, region_only_process_lets_orphans_go);
	suite_add_tcase(s, tc);
	return s;
}
