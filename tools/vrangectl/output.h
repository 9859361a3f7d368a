/* SPDX-License-Identifier: MIT */
/* output.h - vrangectl's tables and JSON documents (contract §8). */
#ifndef VRANGECTL_OUTPUT_H
#define VRANGECTL_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "procs.h"

struct json_object;

const char *vc_access(const struct vc_proc *p);
/* "12.5 MiB": buf of at least 16 bytes. */
const char *vc_human(uint64_t bytes, char *buf, size_t len);

void vc_print_list(FILE *out, const struct vc_proc *p, size_t n);
void vc_print_show(FILE *out, const struct vc_proc *p, bool ranges);
/* The JSON documents; NULL on allocation failure. */
struct json_object *vc_json_list(const struct vc_proc *p, size_t n);
struct json_object *vc_json_show(const struct vc_proc *p, bool ranges);
/* Any bytes as a JSON string (invalid UTF-8 becomes U+FFFD). */
struct json_object *vc_json_str(const char *s);
/* Print a document on stdout and free it: 0, or -EIO. */
int vc_json_print(struct json_object *doc);

#endif
