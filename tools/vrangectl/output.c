/* SPDX-License-Identifier: MIT */
/*
 * output.c - tables for people, JSON (through json-c) for programs.
 * Names come from other processes and may hold any byte: tables show
 * non-printable bytes as '?', JSON strings are made valid UTF-8 first and
 * escaped by json-c.
 */
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"

const char *vc_access(const struct vc_proc *p)
{
	if (p->regions && p->sigbus_regions == p->regions)
		return "sigbus";
	if (p->sigbus_regions == 0)
		return "zero";
	return "mixed";
}

const char *vc_human(uint64_t b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)b;
	unsigned int u = 0;

	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

/* For a table: printable ASCII only, at most max bytes. */
static const char *printable(const char *s, char *buf, size_t len)
{
	size_t i = 0;

	for (; s[i] && i + 1 < len; i++)
		buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	buf[i] = 0;
	return buf;
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
	size_t n;
	uint32_t c;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		n = 2, c = s[0] & 0x1f;
	else if ((s[0] & 0xf0) == 0xe0)
		n = 3, c = s[0] & 0x0f;
	else if ((s[0] & 0xf8) == 0xf0)
		n = 4, c = s[0] & 0x07;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) || (n == 4 && c < 0x10000) ||
	    c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return n;
}

struct json_object *vc_json_str(const char *s)
{
	size_t len = strlen(s), o = 0;
	char *buf = malloc(len * 3 + 1);
	struct json_object *j;

	if (!buf)
		return NULL;
	for (size_t i = 0; i < len;) {
		size_t n = utf8_len((const unsigned char *)s + i);

		if (n == 0) {
			memcpy(buf + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		} else {
			memcpy(buf + o, s + i, n);
			o += n;
			i += n;
		}
	}
	j = json_object_new_string_len(buf, (int)o);
	free(buf);
	return j;
}

static void add_u64(struct json_object *o, const char *k, uint64_t v)
{
	json_object_object_add(o, k, json_object_new_uint64(v));
}

struct json_object *vc_json_list(const struct vc_proc *p, size_t n)
{
	struct json_object *doc = json_object_new_object(), *arr = json_object_new_array();

	for (size_t i = 0; i < n; i++) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "pid", json_object_new_int(p[i].pid));
		json_object_object_add(o, "command", vc_json_str(p[i].comm));
		add_u64(o, "regions", p[i].regions);
		add_u64(o, "files", p[i].files);
		add_u64(o, "caches", p[i].caches);
		add_u64(o, "volatile_bytes", p[i].volatile_bytes);
		add_u64(o, "purged_bytes", p[i].purged_bytes);
		add_u64(o, "resident_bytes", p[i].resident_bytes);
		json_object_object_add(o, "access", json_object_new_string(vc_access(&p[i])));
		json_object_object_add(o, "pressure_source",
				       vc_json_str(p[i].hdr.pressure_source));
		json_object_object_add(o, "monitor",
				       json_object_new_boolean(p[i].hdr.monitor != 0));
		add_u64(o, "purges", p[i].hdr.purges);
		add_u64(o, "purged_total", p[i].hdr.purged_total);
		add_u64(o, "purged_cost", p[i].hdr.purged_cost);
		add_u64(o, "pressure_events", p[i].hdr.pressure_events);
		add_u64(o, "refills", p[i].hdr.refills);
		json_object_array_add(arr, o);
	}
	json_object_object_add(doc, "processes", arr);
	return doc;
}

struct json_object *vc_json_show(const struct vc_proc *p, bool ranges)
{
	struct json_object *doc = json_object_new_object(), *arr = json_object_new_array();

	json_object_object_add(doc, "pid", json_object_new_int(p->pid));
	json_object_object_add(doc, "command", vc_json_str(p->comm));
	for (size_t i = 0; i < p->nobj; i++) {
		const struct vc_object *ob = &p->obj[i];
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "kind", json_object_new_string(vc_kind_names[ob->kind]));
		json_object_object_add(o, "name", vc_json_str(ob->name));
		add_u64(o, "size", ob->size);
		add_u64(o, "volatile_bytes", vc_bytes(ob->vol_pages + ob->purged_pages));
		add_u64(o, "purged_bytes", vc_bytes(ob->purged_pages));
		add_u64(o, "resident_bytes", ob->resident_bytes);
		add_u64(o, "ranges", ob->nranges);
		json_object_object_add(o, "oldest_age_ms", ob->oldest_age_ms < 0 ?
				       NULL : json_object_new_int64(ob->oldest_age_ms));
		json_object_object_add(o, "readable", json_object_new_boolean(ob->readable));
		if (ranges) {
			struct json_object *rl = json_object_new_array();

			for (size_t k = 0; k < ob->nr; k++) {
				struct json_object *r = json_object_new_object();

				add_u64(r, "start", ob->ranges[k].start);
				add_u64(r, "end", ob->ranges[k].end);
				json_object_object_add(r, "state", json_object_new_string(
					ob->ranges[k].purged ? "purged" : "volatile"));
				json_object_object_add(r, "priority",
						       json_object_new_int(ob->ranges[k].prio));
				if (!ob->ranges[k].purged)
					add_u64(r, "cost", ob->ranges[k].cost);
				json_object_array_add(rl, r);
			}
			json_object_object_add(o, "range_list", rl);
		}
		json_object_array_add(arr, o);
	}
	json_object_object_add(doc, "objects", arr);
	return doc;
}

int vc_json_print(struct json_object *doc)
{
	const char *s;
	int r = 0;

	if (!doc)
		return -ENOMEM;
	s = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN |
					   JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!s || puts(s) < 0 || fflush(stdout) != 0)
		r = -EIO;
	json_object_put(doc);
	return r;
}

void vc_print_list(FILE *out, const struct vc_proc *p, size_t n)
{
	char a[16], b[16], c[16], cm[20], ps[20];

	fprintf(out, "%7s %-16s %7s %5s %6s %10s %10s %10s %-6s %-10s %s\n", "PID",
		"COMMAND", "REGIONS", "FILES", "CACHES", "VOLATILE", "PURGED",
		"RESIDENT", "ACCESS", "PRESSURE", "MONITOR");
	for (size_t i = 0; i < n; i++)
		fprintf(out, "%7d %-16s %7" PRIu64 " %5" PRIu64 " %6" PRIu64
			" %10s %10s %10s %-6s %-10s %s\n",
			p[i].pid, printable(p[i].comm, cm, sizeof(cm)), p[i].regions,
			p[i].files, p[i].caches,
			vc_human(p[i].volatile_bytes, a, sizeof(a)),
			vc_human(p[i].purged_bytes, b, sizeof(b)),
			vc_human(p[i].resident_bytes, c, sizeof(c)), vc_access(&p[i]),
			printable(p[i].hdr.pressure_source, ps, sizeof(ps)),
			p[i].hdr.monitor ? "on" : "off");
}

void vc_print_show(FILE *out, const struct vc_proc *p, bool ranges)
{
	char a[16], b[16], c[16], d[16], nm[41], cm[20], ps[20];

	fprintf(out, "pid %d (%s): %" PRIu64 " regions, %" PRIu64 " files, "
		"monitor %s, pressure source %s\n", p->pid,
		printable(p->comm, cm, sizeof(cm)), p->regions, p->files,
		p->hdr.monitor ? "on" : "off",
		printable(p->hdr.pressure_source, ps, sizeof(ps)));
	fprintf(out, "%-9s %-40s %10s %10s %10s %10s %7s %10s\n", "KIND", "NAME",
		"SIZE", "VOLATILE", "PURGED", "RESIDENT", "RANGES", "OLDEST");
	for (size_t i = 0; i < p->nobj; i++) {
		const struct vc_object *o = &p->obj[i];
		char age[24] = "-";

		if (o->oldest_age_ms >= 0)
			snprintf(age, sizeof(age), "%.1f s", (double)o->oldest_age_ms / 1000);
		fprintf(out, "%-9s %-40s %10s %10s %10s %10s %7" PRIu64 " %10s%s\n",
			vc_kind_names[o->kind], printable(o->name, nm, sizeof(nm)),
			o->kind == VC_ANON ? "-" : vc_human(o->size, a, sizeof(a)),
			vc_human(vc_bytes(o->vol_pages + o->purged_pages), b, sizeof(b)),
			vc_human(vc_bytes(o->purged_pages), c, sizeof(c)),
			vc_human(o->resident_bytes, d, sizeof(d)), o->nranges, age,
			o->readable ? "" : "  (state unreadable)");
		for (size_t k = 0; ranges && k < o->nr; k++) {
			fprintf(out, "    [0x%" PRIx64 ", 0x%" PRIx64 ") %-8s prio %d",
				o->ranges[k].start, o->ranges[k].end,
				o->ranges[k].purged ? "purged" : "volatile", o->ranges[k].prio);
			if (!o->ranges[k].purged)
				fprintf(out, " cost %" PRIu32, o->ranges[k].cost);
			fputc('\n', out);
		}
	}
}
