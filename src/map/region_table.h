/* SPDX-License-Identifier: MIT */
/*
 * region_table.h - regions by base address (region_table.c); lookups go
 * through region_lookup() (region.h).
 */
#ifndef VRANGE_REGION_TABLE_H
#define VRANGE_REGION_TABLE_H

#include <stddef.h>

#include "region.h"

/* Make r (mapped at base, size bytes) found by address: 0 or -ENOMEM. */
int region_table_insert(char *base, size_t size, struct vrange_region *r) VR_HIDDEN;
/* r, mapped at base, is no longer found (nothing if it was not listed). */
void region_table_remove(const char *base, const struct vrange_region *r) VR_HIDDEN;

#endif
