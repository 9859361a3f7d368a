/* SPDX-License-Identifier: MIT */
/* uffd_purge.c - placeholder until SIGBUS mode lands: ZERO mode only. */
#include <errno.h>

#include "uffd_purge.h"

bool uffd_available(void)
{
	return false;
}

const char *uffd_fallback_reason(void)
{
	return "not implemented yet";
}

int uffd_before_discard(struct vmap *m, size_t off, size_t len)
{
	return 0;
}

void uffd_after_discard(struct vmap *m, size_t off, size_t len)
{
}

void uffd_after_nonvolatile(struct vmap *m, size_t off, size_t len)
{
}

int uffd_region_refill(struct vrange_region *r)
{
	return -EOPNOTSUPP;
}

void uffd_region_gone(struct vrange_region *r)
{
}
