/* SPDX-License-Identifier: MIT */
/* mark_clock.c - the age of a volatile mark (mark_clock.h). */
#include <elf.h>
#include <stdbool.h>
#include <string.h>
#include <sys/auxv.h>

#include "mark_clock.h"

/*
 * Ages are CLOCK_MONOTONIC_COARSE nanoseconds: one clock for every process
 * on the machine, so ranges marked by different processes in one shared
 * file (and files marked by different processes) order against each other
 * to within a tick.  The coarse clock is a vDSO read of the last tick,
 * with no system call, and signal-safe.
 *
 * Within a tick each thread counts on from its own last stamp.  A global
 * counter would make every stamp unique, but its compare-and-swap is a
 * cache line every marking thread writes: two threads marking their own
 * regions would run no faster than one.  Uniqueness is not needed - equal
 * stamps only mean "marked at the same moment"; the purge order breaks
 * ties by address.  What is needed is an order across threads at a few
 * moments (a purge pass starts, the application unmapped memory): a
 * barrier stamp is later than every stamp taken before it, in any thread,
 * and earlier than every stamp taken after it.  Before: a thread's count
 * never runs ahead of the precise clock (each mark takes far longer than
 * the nanosecond it adds, and the tick's time is the clock's, read
 * earlier).  After: every stamp is above the last barrier's (vr_clock.floor).
 *
 * The tick (issue 28).  Even through the vDSO, the clock read was a
 * seventh of a mark pair's cost.  While the monitor's thread runs, it
 * ticks instead: it reads the coarse clock once per tick of that clock
 * (clock_getres) into vr_clock.now, and stamps take that - one load of a
 * line every marking thread keeps in its cache.  It ticks only while
 * stamps are taken, so an idle process is not woken for it:
 *
 *   IDLE --a stamp (reads the clock, wakes the ticker)--> MARKED
 *   MARKED --the ticker's turn (refreshes now)--> ARMED
 *   ARMED --a stamp (one compare-and-swap a tick)--> MARKED
 *   ARMED --a whole tick without one--> IDLE (the ticker sleeps)
 *
 * A stamp that finds the ticker asleep reads the clock itself, so no stamp
 * ever takes a time older than the last tick before it plus the ticker's
 * lateness: the order across threads and processes is to within a tick
 * and however late the ticker runs (the monitor purging, or kept off the
 * CPU).  A thread's own order is exact whatever the ticker does (the
 * count from its last stamp), and every 256th stamp of a thread reads the
 * clock regardless (mark_clock.h): a late ticker holds no busy thread's
 * stamps back by more than 256 marks.  Without a ticker (the monitor off,
 * or its thread gone) every stamp reads the clock, as before the tick.
 */
__thread uint64_t vr_seq_last __attribute__((tls_model("initial-exec")));
_Alignas(128) struct vr_clock vr_clock;
int (*vr_vdso_gettime)(clockid_t, struct timespec *);

static void (*_Atomic tick_waker)(void);
static uint64_t tick_ns = 4000000;   /* the coarse clock's resolution */
static uint64_t last_tick;           /* the ticker's own */

uint64_t vr_next_seq(void)
{
	return vr_next_seq_inline();
}

uint64_t vr_seq_barrier(void)
{
	struct timespec ts;
	uint64_t stamp, cur;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	stamp = vr_stamp_after((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
	cur = atomic_load_explicit(&vr_clock.floor, memory_order_relaxed);
	while (cur < stamp &&
	       !atomic_compare_exchange_weak_explicit(&vr_clock.floor, &cur, stamp,
						      memory_order_seq_cst,
						      memory_order_relaxed))
		;
	return stamp;
}

/* A symbol of the vDSO (its dynamic symbol table, found from its program
 * headers as the kernel's parse_vdso.c does), or NULL. */
static void *vdso_sym(const char *name)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)getauxval(AT_SYSINFO_EHDR);
	const Elf64_Phdr *ph;
	const Elf64_Dyn *dyn = NULL;
	const Elf64_Sym *sym = NULL;
	const Elf64_Word *hash = NULL;
	const char *str = NULL;
	uintptr_t bias = 0;
	bool load = false;

	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64)
		return NULL;
	ph = (const Elf64_Phdr *)((const char *)eh + eh->e_phoff);
	for (unsigned int i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type == PT_LOAD && !load) {
			bias = (uintptr_t)eh + ph[i].p_offset - ph[i].p_vaddr;
			load = true;
		} else if (ph[i].p_type == PT_DYNAMIC) {
			dyn = (const Elf64_Dyn *)((const char *)eh + ph[i].p_offset);
		}
	}
	if (!dyn || !load)
		return NULL;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_STRTAB)
			str = (const char *)(bias + dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_SYMTAB)
			sym = (const Elf64_Sym *)(bias + dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_HASH)
			hash = (const Elf64_Word *)(bias + dyn->d_un.d_ptr);
	}
	if (!str || !sym || !hash)
		return NULL;
	for (Elf64_Word k = 0; k < hash[1]; k++)
		if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC &&
		    sym[k].st_shndx != SHN_UNDEF && strcmp(str + sym[k].st_name, name) == 0)
			return (void *)(bias + sym[k].st_value);
	return NULL;
}

/* The vDSO's clock_gettime, kept only if it answers the coarse clock. */
static void find_vdso_clock(void)
{
	int (*get)(clockid_t, struct timespec *) =
		(int (*)(clockid_t, struct timespec *))vdso_sym("__vdso_clock_gettime");
	struct timespec ts;

	if (get && get(CLOCK_MONOTONIC_COARSE, &ts) == 0)
		vr_vdso_gettime = get;
}

void vr_mark_clock_init(void)
{
	struct timespec res;

	find_vdso_clock();
	if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && !res.tv_sec &&
	    res.tv_nsec >= 1000000)
		tick_ns = (uint64_t)res.tv_nsec;
}

/* The tick's time only grows (a waking stamp and the ticker both set it). */
static void raise_now(uint64_t now)
{
	uint64_t cur = atomic_load_explicit(&vr_clock.now, memory_order_relaxed);

	while (cur < now &&
	       !atomic_compare_exchange_weak_explicit(&vr_clock.now, &cur, now,
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
}

void vr_tick_wake(uint64_t now)
{
	uint32_t idle = VR_TICK_IDLE;
	void (*waker)(void);

	/* The time first: a stamp that sees MARKED takes it. */
	raise_now(now);
	if (!atomic_compare_exchange_strong(&vr_clock.state, &idle, VR_TICK_MARKED))
		return; /* another stamp woke it, or the ticker went */
	waker = atomic_load(&tick_waker);
	if (waker)
		waker();
}

void vr_tick_attach(void (*waker)(void))
{
	uint32_t self = VR_TICK_SELF;

	if (!waker) {
		atomic_store(&vr_clock.state, VR_TICK_SELF);
		atomic_store(&tick_waker, NULL);
		return;
	}
	atomic_store(&tick_waker, waker);
	atomic_compare_exchange_strong(&vr_clock.state, &self, VR_TICK_IDLE);
}

static int ms_until(uint64_t ns)
{
	return (int)((ns + 999999) / 1000000);
}

int vr_tick_step(void)
{
	uint32_t st = atomic_load(&vr_clock.state);
	uint64_t now;

	if (st != VR_TICK_ARMED && st != VR_TICK_MARKED)
		return -1; /* asleep, or detached: no clock read */
	now = vr_coarse_ns();
	if (st == VR_TICK_ARMED) {
		/* Woken early (another event): a whole tick before sleeping. */
		if (now - last_tick < tick_ns)
			return ms_until(tick_ns - (now - last_tick));
		if (atomic_compare_exchange_strong(&vr_clock.state, &st, VR_TICK_IDLE))
			return -1;
		/* A stamp said MARKED meanwhile: tick. */
	}
	if (st != VR_TICK_MARKED)
		return -1;
	raise_now(now);
	last_tick = now;
	/* Only the ticker leaves MARKED, but for SELF: detached meanwhile. */
	if (!atomic_compare_exchange_strong(&vr_clock.state, &st, VR_TICK_ARMED))
		return -1;
	return ms_until(tick_ns);
}
