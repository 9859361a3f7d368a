/* SPDX-License-Identifier: MIT */
/*
 * fault_inject.h - failing the library's system calls and allocations on
 * purpose (-Dfault_injection=true only).
 *
 * The fault build links the library's objects once more, into
 * libvrange_fault.so, with `-Wl,--wrap=<sym>` for every libc function the
 * library calls that can fail: each call then goes through __wrap_<sym> in
 * fault_inject.c, which counts it under a "site" (a kind of call: one per
 * function, one per userfaultfd ioctl request, one per syscall() number) and
 * can make the N-th call of one site fail with a chosen errno.  No source
 * file of the library changes, and the normal libvrange.so is built as
 * before.  The sweep test (tests/test_fault_sweep.c) drives this.
 *
 * How --wrap reaches the calls: it rewrites undefined references in the
 * objects of one link, so the objects of the internal static library are
 * linked into a shared library of their own (an application linking
 * libvrange.a with --wrap would have its own calls wrapped too).  syscall()
 * is a libc function like any other: userfaultfd and futex are told apart
 * by number; the library makes no inline-assembly system call.  The ashmem
 * shim gets the same treatment (libvrange-ashmem-fault.so); there __real_
 * of a name the shim itself defines (open64, mmap64, ioctl, ...) is the
 * shim's interceptor, which passes the call on.
 *
 * Not covered: calls glibc makes internally (fopen's open, printf's
 * write), the vDSO clock, calls that cannot fail in a way the library
 * could see (free, getpid, gettid, pthread_mutex_*, sigprocmask), kill()
 * (the shared lock reads ESRCH as "owner dead": a fake one would be a lie
 * the kernel never tells about a live process), and the shim's calls
 * through the function pointers it resolves with dlsym (shim_real.*),
 * which no link-time option can reach.
 */
#ifndef VRANGE_FAULT_INJECT_H
#define VRANGE_FAULT_INJECT_H

#include <stdbool.h>
#include <stdint.h>

#pragma GCC visibility push(default)
/* Forget all counts and any armed fault. */
void vrange_fault_reset(void);
/* Number of sites; a site's name ("mmap", "ioctl:UFFDIO_POISON", ...). */
unsigned vrange_fault_nsites(void);
const char *vrange_fault_site_name(unsigned site);
/* The errnos worth injecting at a site (what the kernel can return). */
const int *vrange_fault_site_errnos(unsigned site, unsigned *n);
/* Calls of a site since the last reset. */
uint64_t vrange_fault_count(unsigned site);
/* Make call number nth (1-based, counted since the last reset) of site
 * fail with err, once. */
void vrange_fault_arm(unsigned site, uint64_t nth, int err);
/* Has the armed fault been delivered? */
bool vrange_fault_fired(void);
#pragma GCC visibility pop

#endif
