/* SPDX-License-Identifier: MIT */
/*
 * bench_passthrough - what the preload costs a program that never touches
 * ashmem: plain ioctl/open+close/fstat/read/mmap loops, measured in this
 * process without the shim and in a re-executed copy with
 * LD_PRELOAD=<argv[1]>, and printed side by side with their ratio.
 * Nothing asserts on time.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOPS 5

static const char *names[NOPS] = { "ioctl(FIONREAD)", "open+close", "fstat", "read 1 byte",
				   "mmap+munmap anon" };

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ns per operation, best of 5 runs of n each */
static void measure(double out[NOPS])
{
	int n = getenv("VRANGE_TEST_QUICK") ? 20000 : 200000;
	int fd = open("/dev/zero", O_RDONLY);
	struct stat st;
	char c;

	for (int op = 0; op < NOPS; op++) {
		double best = 1e30;

		for (int rep = 0; rep < 5; rep++) {
			double t0 = now();

			for (int i = 0; i < n; i++) {
				int v;

				switch (op) {
				case 0:
					ioctl(fd, FIONREAD, &v);
					break;
				case 1:
					close(open("/dev/null", O_RDONLY));
					break;
				case 2:
					fstat(fd, &st);
					break;
				case 3:
					if (read(fd, &c, 1) != 1)
						abort();
					break;
				default:
					munmap(mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
						    -1, 0), 4096);
				}
			}
			double dt = (now() - t0) / n;
			if (dt < best)
				best = dt;
		}
		out[op] = best;
	}
	close(fd);
}

int main(int argc, char **argv)
{
	double base[NOPS], pre[NOPS];
	char line[256];
	int pfd[2];
	pid_t pid;
	FILE *f;

	if (argc > 1 && strcmp(argv[1], "--measure") == 0) {
		measure(pre);
		for (int i = 0; i < NOPS; i++)
			printf("%.2f\n", pre[i]);
		return 0;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: %s <LD_PRELOAD value>\n", argv[0]);
		return 2;
	}
	unsetenv("LD_PRELOAD");
	measure(base);
	if (pipe(pfd) < 0)
		return 1;
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		setenv("LD_PRELOAD", argv[1], 1);
		setenv("VRANGE_MONITOR", "0", 1);
		execl("/proc/self/exe", argv[0], "--measure", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	f = fdopen(pfd[0], "r");
	for (int i = 0; i < NOPS; i++)
		pre[i] = (f && fgets(line, sizeof(line), f)) ? atof(line) : 0;
	waitpid(pid, NULL, 0);
	printf("%-20s %12s %12s %8s\n", "pass-through op", "plain ns", "preload ns", "ratio");
	for (int i = 0; i < NOPS; i++)
		printf("%-20s %12.1f %12.1f %8.3f\n", names[i], base[i], pre[i],
		       base[i] > 0 ? pre[i] / base[i] : 0);
	return 0;
}
