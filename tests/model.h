/* SPDX-License-Identifier: MIT */
/*
 * model.h - the operation vocabulary of the model test (test_model.c).
 *
 * The test's coordinator holds the reference model and decides every
 * operation; a process (the coordinator itself or a peer) carries one out
 * with model_exec() against its own table of objects and reports what it
 * saw: return codes and, per page, how the page's bytes compare with what
 * the model expects.  The same executor runs in every process, so an
 * operation means the same wherever it runs and the checks live in one
 * place.
 */
#ifndef VRANGE_TEST_MODEL_H
#define VRANGE_TEST_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <vrange.h>

#define M_MAXPG   8   /* pages per file or mapping */
#define M_MAXOBJ  40  /* objects (views) alive at once, all processes */
#define M_MAXFILE 24  /* files alive at once */
#define M_MAXPROC 4   /* the coordinator and up to three peers */

#define SEED_UNKNOWN 0xffffffffu /* content not predictable (seed 0: zeros) */

enum op_type {
	OP_NEWFILE,   /* file: memfd (arg 0) or /dev/shm (arg 1), npg pages */
	OP_CREATE,    /* obj = region on a new library file; arg flags */
	OP_ADOPT,     /* obj = vrange_region_adopt(file's fd, arg flags) */
	OP_DESTROY,   /* vrange_region_destroy(obj) */
	OP_MAP,       /* obj = mmap: arg 0 private anonymous, 1 MAP_SHARED of file; a2 = address wanted */
	OP_UNMAP,     /* munmap(obj) */
	OP_MARK,      /* mark [off, off+len) of obj volatile; arg = how */
	OP_UNMARK,    /* mark non-volatile; arg = how; observes the pages touched */
	OP_ISVOL,     /* is_volatile; arg = how */
	OP_WRITE,     /* write page pg0 of obj with pattern seed */
	OP_READ,      /* observe pages [pg0, pg0+npg) of obj */
	OP_PURGE,     /* vrange_purge(a2) */
	OP_RPURGE,    /* vrange_region_purge(obj) */
	OP_PRIO,      /* vrange_region_set_priority(obj, arg) */
	OP_BUDGET,    /* a2 != 0: monitor on + budget a2; 0: budget off, monitor off */
	OP_DROPFILE,  /* vrange_fd_forget + close the process's fd of file */
	OP_RECVFILE,  /* the message carries file's fd (SCM_RIGHTS): keep it */
	OP_BAD,       /* a bad input of kind arg; rc must be in the allowed set */
	OP_FORGET,    /* vrange_fd_forget on the file of obj (views kept) */
	OP_EXIT,      /* the peer leaves (everything already destroyed) */
	OP_STATS,     /* vrange_get_stats: rc pressure events acted on, addr
		       * purge passes, cls the monitor's source (a report) */
	OP_NTYPES
};

/* OP_MAP / OP_UNMAP: never reuse an address (see model_exec.c). */
#define MAP_ARENA 2

enum how { HOW_REGION, HOW_VRANGE, HOW_FD };

/* What a page looked like compared with the pattern the model expects. */
enum cls { CLS_MATCH, CLS_ZERO, CLS_SIGBUS, CLS_OTHER };

struct m_op {
	uint32_t n;          /* sequence number: the replay position */
	uint8_t type;
	uint8_t proc;        /* the process that carries it out */
	uint16_t obj;
	uint16_t file;
	uint8_t pg0, npg;    /* pages observed (OP_UNMARK, OP_READ, OP_WRITE) */
	int32_t arg;
	uint64_t off, len;   /* bytes, relative to the object (or file) */
	uint64_t a2;
	uint32_t seed;       /* OP_WRITE */
	uint32_t exp[M_MAXPG]; /* expected seed of each observed page */
};

struct m_res {
	int64_t rc;
	int32_t purged;      /* vrange()'s *purged */
	int32_t aux;         /* OP_CREATE/ADOPT: the access mode in force */
	uint64_t addr;       /* OP_CREATE/ADOPT/MAP: where it landed */
	uint8_t cls[M_MAXPG];
};

/* Bad inputs OP_BAD generates (model_exec.c knows how, test_model.c the answer). */
enum bad_kind {
	BAD_LEN0_REGION_MARK, BAD_LEN0_REGION_UNMARK, BAD_LEN0_REGION_ISVOL,
	BAD_LEN0_FD_MARK, BAD_LEN0_FD_UNMARK, BAD_LEN0_VRANGE,
	BAD_PAST_END_REGION, BAD_PAST_END_FD, BAD_OVERFLOW_REGION,
	BAD_OVERFLOW_FD, BAD_NEG_FD, BAD_NULL_REGION, BAD_VRANGE_NULL,
	BAD_VRANGE_MODE, BAD_VRANGE_WRAP, BAD_CLOSED_FD, BAD_NOT_SHM_FD,
	BAD_FORGET_NOSTATE, BAD_CREATE_SIZE0, BAD_CREATE_BOTHFLAGS,
	BAD_ADOPT_EMPTY, BAD_PRIVATE_FILE_MAP, BAD_VRANGE_UNMAPPED,
	BAD_PURGE0, BAD_VRANGE_SPAN_REGION, BAD_NKINDS
};

/* The executor's side. */
void model_exec_init(size_t page_size);
void model_exec(const struct m_op *op, int recv_fd, struct m_res *res);
void model_fill(void *page, uint32_t seed);
/* Compare a page with pattern exp under the SIGBUS guard (enum cls). */
uint8_t model_observe(const void *page, uint32_t exp);
/* How often BAD_VRANGE_UNMAPPED's hole was filled by the library itself. */
uint64_t model_exec_hole_filled(void);
void model_exec_addr_history(uintptr_t a, uintptr_t b, FILE *out);
/* This process's descriptor of a file (to pass on), or -1. */
int model_exec_fd(int file);
/* Release whatever the executor still holds (a peer leaving). */
void model_exec_reset(void);

#endif
