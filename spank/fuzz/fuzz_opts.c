/*
 * fuzz_opts.c - libFuzzer target over every hetero_opts.c entry point.
 *
 * Input: byte 0 picks the entry point, byte 1 an error-buffer length, the
 * rest is the value (or space-separated plugstack arguments). Seeds: the
 * values of tests/data/grammar/options.cases (`make fuzz-seeds`), which the
 * job_submit bridge must judge the same way (tests/lua/grammar_fuzz.py
 * compares both sides on mutated values). Besides the
 * sanitizers, it asserts what the plugin promises: accepted values are
 * short and free of shell/terminal metacharacters, parsed fields are in
 * range, and every error message is one NUL-terminated printable line.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hetero_opts.h"

#define ASSERT(c) do { if (!(c)) abort(); } while (0)

static int printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

/* Accepted values may only hold [A-Za-z0-9._:/,=>-]. */
static void check_accepted(const char *v)
{
	ASSERT(strlen(v) >= 1 && strlen(v) <= HETERO_VALUE_MAX);
	ASSERT(strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		      "0123456789._:/,=>-") == strlen(v));
}

static void check_err(int rc, const char *err, size_t errlen)
{
	ASSERT(rc == 0 || rc == -1);
	if (rc == 0 || errlen == 0)
		return;
	ASSERT(memchr(err, '\0', errlen) != NULL);
	ASSERT(err[0] != '\0' || errlen == 1);
	ASSERT(printable(err));
}

static void check_list(const struct hetero_list *l)
{
	unsigned i;

	ASSERT(l->n <= HETERO_LIST_MAX);
	for (i = 0; i < l->n; i++) {
		ASSERT(strlen(l->name[i]) >= 1 && strlen(l->name[i]) <= HETERO_POLICY_MAX);
		ASSERT(strspn(l->name[i], "abcdefghijklmnopqrstuvwxyz0123456789_-")
		       == strlen(l->name[i]));
	}
}

/* A parsed energy/tier name is the value, lower-cased. */
static void check_name(const char *v, const char *name)
{
	size_t i;

	ASSERT(strlen(name) == strlen(v) && strlen(name) <= HETERO_POLICY_MAX);
	for (i = 0; v[i]; i++)
		ASSERT(name[i] == ((v[i] >= 'A' && v[i] <= 'Z') ? v[i] - 'A' + 'a' : v[i]));
}

/* Splits s in place on ' ' into at most 8 arguments. */
static int split(char *s, char *argv[8])
{
	int n = 0;
	char *p;

	while (n < 8) {
		argv[n++] = s;
		if (!(p = strchr(s, ' ')))
			break;
		*p = '\0';
		s = p + 1;
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct hetero_conf site; /* lists from the last good conf */
	char err[HETERO_ERR_MAX], *v, *argv[8], name[HETERO_POLICY_MAX + 1];
	char dir[HETERO_VALUE_MAX + 1];
	struct hetero_image img;
	struct hetero_accel a;
	enum hetero_arch arch;
	struct hetero_conf c;
	size_t errlen;
	int rc, op;

	if (size < 2)
		return 0;
	op = data[0] % 9; /* 6: plugstack arguments */
	/* Mostly full buffers; sometimes tiny ones to test truncation. */
	errlen = data[1] < 200 ? sizeof(err) : (size_t)(data[1] - 200);
	v = malloc(size - 1);
	if (!v)
		return 0;
	memcpy(v, data + 2, size - 2);
	v[size - 2] = '\0';

	switch (op) {
	case 0:
		rc = hetero_parse_accel(v, &a, err, errlen);
		if (rc == 0) {
			check_accepted(v);
			ASSERT(a.mem_mib <= HETERO_MEM_MAX_MIB);
			ASSERT(strlen(a.name) <= HETERO_ACCEL_NAME_MAX);
			if (a.kind == HETERO_ACCEL_UNITS)
				ASSERT(a.count == 0 && a.units_milli >= 1
				       && a.units_milli <= HETERO_UNITS_MAX * 1000u
				       && !a.name[0]);
			else
				ASSERT(a.count >= 1 && a.count <= HETERO_COUNT_MAX
				       && a.units_milli == 0
				       && (a.kind == HETERO_ACCEL_ANY) == !a.name[0]);
		}
		break;
	case 1:
		rc = hetero_parse_arch(v, &arch, err, errlen);
		if (rc == 0) {
			check_accepted(v);
			ASSERT(strcmp(hetero_arch_name(arch), "?"));
		}
		break;
	case 2:
		rc = hetero_parse_energy(v, NULL, name, err, errlen);
		if (rc == 0)
			check_name(v, name);
		break;
	case 3:
		rc = hetero_parse_tier(v, &site.tiers, name, err, errlen);
		if (rc == 0)
			check_name(v, name);
		break;
	case 4:
		rc = hetero_parse_image(v, &img, err, errlen);
		if (rc == 0) { /* NAME[:TAG] put back together is the value */
			ASSERT(strlen(img.tag) <= HETERO_TAG_MAX);
			ASSERT(!strncmp(v, img.name, strlen(img.name)));
			ASSERT(img.tag[0] ? v[strlen(img.name)] == ':'
			       && !strcmp(v + strlen(img.name) + 1, img.tag)
			       : !strcmp(v, img.name));
		}
		break;
	case 5:
		rc = hetero_check_energy(v, &site.energy, err, errlen);
		break;
	case 7:
		rc = hetero_parse_checkpoint(v, dir, err, errlen);
		if (rc == 0) { /* absolute, printable, no ".." component */
			ASSERT(!strcmp(dir, v) && v[0] == '/' && printable(v));
			ASSERT(!strchr(v, ' ') && strlen(v) <= HETERO_VALUE_MAX);
			ASSERT(!strstr(v, "/../") && (strlen(v) < 3
			       || strcmp(v + strlen(v) - 3, "/..")));
		}
		break;
	case 8:
		rc = hetero_check_migratable(v, err, errlen);
		if (rc == 0)
			ASSERT(!*v || !strcmp(v, HETERO_FLAG_NULL));
		check_err(rc, err, errlen);
		free(v);
		return 0;
	default:
		rc = hetero_conf_parse(&c, split(v, argv), argv, err, errlen);
		check_list(&c.energy);
		check_list(&c.tiers);
		if (rc == 0)
			site = c;
		else
			ASSERT(!c.energy.n && !c.tiers.n);
		check_err(rc, err, errlen);
		free(v);
		return 0;
	}
	if (rc == 0 && op != 0 && op != 1 && op != 7)
		check_accepted(v);
	check_err(rc, err, errlen);
	free(v);
	return 0;
}
