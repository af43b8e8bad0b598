/*
 * test_opts.c - unit tests of hetero_opts.c, built without Slurm (plain and with
 * -fsanitize=address,undefined by `make test`). The value cases live in the case file
 * tests/data/grammar/options.cases, shared with the job_submit bridge's Lua tests;
 * this file adds what only C has (NULL, error buffers, plugstack lists, structs).
 *
 * An embedded NUL cannot be tested: option values reach the plugin as C
 * strings, so "a\0b" is simply "a" (argv and the job env cannot hold NUL).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hetero_opts.h"

static int passed, failed;

#define CHECK(cond, ...) do {                                           \
	if (cond) {                                                     \
		passed++;                                               \
	} else {                                                        \
		failed++;                                               \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);    \
		fprintf(stderr, __VA_ARGS__);                           \
		fputc('\n', stderr);                                    \
	}                                                               \
} while (0)

enum which { ACCEL, ARCH, ENERGY, TIER, IMAGE, ENERGY_L, TIER_L };
static const char *const which_name[] = {
	"accel", "arch", "energy", "tier", "image", "energy", "tier"
};

/* The lists a typical plugstack.conf line gives; *_L cases use them. */
static struct hetero_conf site;

static int run(enum which w, const char *v, char *err, size_t errlen)
{
	switch (w) {
	case ACCEL:
		return hetero_check_accel(v, err, errlen);
	case ARCH:
		return hetero_check_arch(v, err, errlen);
	case ENERGY:
		return hetero_check_energy(v, NULL, err, errlen);
	case TIER:
		return hetero_check_tier(v, NULL, err, errlen);
	case IMAGE:
		return hetero_check_image(v, err, errlen);
	case ENERGY_L:
		return hetero_check_energy(v, &site.energy, err, errlen);
	case TIER_L:
		return hetero_check_tier(v, &site.tiers, err, errlen);
	}
	return -2;
}

static int printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

/* Test names must not mess up the terminal either. */
static const char *esc(const char *v)
{
	static char buf[80];
	size_t i;

	if (!v)
		return "(null)";
	for (i = 0; v[i] && i < sizeof(buf) - 1; i++)
		buf[i] = ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e) ? '?' : v[i];
	buf[i] = '\0';
	return buf;
}

/* One value against one checker; rejections must carry a clean message. */
static void expect(enum which w, const char *v, int ok)
{
	char err[HETERO_ERR_MAX] = "", head[32];
	int rc = run(w, v, err, sizeof(err));

	CHECK(rc == (ok ? 0 : -1), "--%s='%s': want %s, got %d (%s)",
	      which_name[w], esc(v), ok ? "accept" : "reject", rc, err);
	if (ok || rc != -1)
		return;
	snprintf(head, sizeof(head), "--%s='", which_name[w]);
	CHECK(!strncmp(err, head, strlen(head)) && strstr(err, "): use ")
	      && printable(err) && strlen(err) < 1400,
	      "--%s='%s': bad message: %s", which_name[w], esc(v), err);
}

static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);

	if (!s)
		abort();
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* Lengths: 256 bytes is the limit for every value; names have their own. */
static void test_lengths(void)
{
	char *s = repeat('a', 10240), buf[400];
	enum which w;

	for (w = ACCEL; w <= TIER_L; w++) {
		expect(w, NULL, 0);
		expect(w, s, 0); /* 10 kB */
	}
	s[256] = '\0';
	expect(IMAGE, s, 1); /* 256 bytes */
	s[256] = 'a';
	s[257] = '\0';
	expect(IMAGE, s, 0); /* 257 bytes */
	snprintf(buf, sizeof(buf), "x:%.128s", s);
	expect(IMAGE, buf, 1); /* tag of 128 */
	snprintf(buf, sizeof(buf), "x:%.129s", s);
	expect(IMAGE, buf, 0);
	snprintf(buf, sizeof(buf), "%.64s:1024,mem>=1048576T", s);
	expect(ACCEL, buf, 1); /* NAME of 64 */
	snprintf(buf, sizeof(buf), "%.65s", s);
	expect(ACCEL, buf, 0);
	snprintf(buf, sizeof(buf), "%.32s", s);
	expect(ENERGY, buf, 1);
	expect(TIER, buf, 1);
	snprintf(buf, sizeof(buf), "%.33s", s);
	expect(ENERGY, buf, 0);
	expect(TIER, buf, 0);
	free(s);
}

static void test_accel_struct(void)
{
	struct hetero_accel a;

	CHECK(!hetero_parse_accel("A100-80GB:4", &a, NULL, 0)
	      && a.kind == HETERO_ACCEL_NAME && !strcmp(a.name, "a100-80gb")
	      && a.count == 4 && a.units_milli == 0 && a.mem_mib == 0,
	      "A100-80GB:4 -> %d %s %u", a.kind, a.name, a.count);
	CHECK(!hetero_parse_accel("nvidia", &a, NULL, 0) && a.count == 1,
	      "nvidia -> count %u", a.count);
	CHECK(!hetero_parse_accel("Any:8", &a, NULL, 0) && a.kind == HETERO_ACCEL_ANY
	      && !a.name[0] && a.count == 8, "Any:8 -> %d %u", a.kind, a.count);
	CHECK(!hetero_parse_accel("units=2.5,mem>=80GB", &a, NULL, 0)
	      && a.kind == HETERO_ACCEL_UNITS && a.units_milli == 2500
	      && a.count == 0 && a.mem_mib == 81920,
	      "units=2.5 -> %u %llu", a.units_milli, (unsigned long long)a.mem_mib);
	CHECK(!hetero_parse_accel("units=0.05", &a, NULL, 0) && a.units_milli == 50,
	      "units=0.05 -> %u", a.units_milli);
	CHECK(!hetero_parse_accel("h100,mem>=1K", &a, NULL, 0) && a.mem_mib == 1,
	      "mem>=1K -> %llu", (unsigned long long)a.mem_mib);
	CHECK(!hetero_parse_accel("h100,mem>=1025k", &a, NULL, 0) && a.mem_mib == 2,
	      "mem>=1025k -> %llu", (unsigned long long)a.mem_mib);
	CHECK(!hetero_parse_accel("h100,mem>=512", &a, NULL, 0) && a.mem_mib == 512,
	      "mem>=512 -> %llu", (unsigned long long)a.mem_mib);
	CHECK(!hetero_parse_accel("h100,mem>=1T", &a, NULL, 0) && a.mem_mib == 1048576,
	      "mem>=1T -> %llu", (unsigned long long)a.mem_mib);
	/* out is untouched on failure */
	a.count = 77;
	CHECK(hetero_parse_accel("h100:0", &a, NULL, 0) == -1 && a.count == 77,
	      "h100:0 wrote out");
}

static void test_arch_parse(void)
{
	enum hetero_arch a = HETERO_ARCH_ANY;

	CHECK(!hetero_parse_arch("ARM64", &a, NULL, 0) && a == HETERO_ARCH_AARCH64
	      && !strcmp(hetero_arch_name(a), "aarch64"), "ARM64 -> %d", a);
	CHECK(!hetero_parse_arch("armv8", &a, NULL, 0) && a == HETERO_ARCH_AARCH64,
	      "armv8 -> %d", a);
	CHECK(!hetero_parse_arch("X86_64", &a, NULL, 0) && a == HETERO_ARCH_X86_64
	      && !strcmp(hetero_arch_name(a), "x86_64"), "X86_64 -> %d", a);
	CHECK(!hetero_parse_arch("Any", &a, NULL, 0) && a == HETERO_ARCH_ANY
	      && !strcmp(hetero_arch_name(a), "any"), "Any -> %d", a);
}

static void test_image_parse(void)
{
	struct hetero_image img;

	memset(&img, 'z', sizeof(img));
	CHECK(!hetero_parse_image("nvcr.io/nvidia/pytorch:24.05-py3", &img, NULL, 0)
	      && !strcmp(img.name, "nvcr.io/nvidia/pytorch") && !strcmp(img.tag, "24.05-py3"),
	      "image -> %s %s", img.name, img.tag);
	CHECK(!hetero_parse_image("Ubuntu", &img, NULL, 0) && !strcmp(img.name, "Ubuntu")
	      && !img.tag[0], "Ubuntu -> %s '%s'", img.name, img.tag);
	/* out is untouched on failure */
	CHECK(hetero_parse_image("a//b", &img, NULL, 0) == -1 && !strcmp(img.name, "Ubuntu"),
	      "a//b wrote out");
	CHECK(hetero_check_image("a:b", NULL, 0) == 0, "check_image");
}

static void test_checkpoint_and_flag(void)
{
	char dir[HETERO_VALUE_MAX + 1], err[HETERO_ERR_MAX], *s = repeat('a', 300);

	memset(dir, 'z', sizeof(dir));
	CHECK(!hetero_parse_checkpoint("/shared/ckpt/run.1", dir, NULL, 0)
	      && !strcmp(dir, "/shared/ckpt/run.1"), "checkpoint -> %s", dir);
	/* out is untouched on failure */
	CHECK(hetero_parse_checkpoint("/a/../b", dir, NULL, 0) == -1
	      && !strcmp(dir, "/shared/ckpt/run.1"), "/a/../b wrote out");
	CHECK(hetero_check_checkpoint(NULL, err, sizeof(err)) == -1, "checkpoint NULL");
	s[0] = '/';
	s[256] = '\0';
	CHECK(!hetero_parse_checkpoint(s, dir, NULL, 0) && strlen(dir) == 256,
	      "256-byte path: %zu", strlen(dir));
	s[256] = 'a';
	s[257] = '\0';
	CHECK(hetero_check_checkpoint(s, err, sizeof(err)) == -1
	      && strstr(err, "(longer than 256 bytes): use an absolute path"), "257: %s", err);
	hetero_check_checkpoint("/a/..", err, sizeof(err));
	CHECK(strstr(err, "('..' components are not allowed at offset 3: '.')") != NULL,
	      "dotdot message: %s", err);
	hetero_check_checkpoint("rel/dir", err, sizeof(err));
	CHECK(strstr(err, "(DIR must be an absolute path at offset 0: 'r')") != NULL,
	      "relative message: %s", err);
	hetero_check_checkpoint("/a b", err, sizeof(err));
	CHECK(strstr(err, "(whitespace or not printable ASCII at offset 2: byte 0x20)") != NULL,
	      "space message: %s", err);
	/* the flag: what the client (NULL) and the environment ("", "(null)") hand over */
	CHECK(!hetero_check_migratable(NULL, err, sizeof(err)), "migratable NULL");
	CHECK(!hetero_check_migratable("", err, sizeof(err)), "migratable empty");
	CHECK(!hetero_check_migratable(HETERO_FLAG_NULL, err, sizeof(err)), "migratable (null)");
	CHECK(hetero_check_migratable("yes", err, sizeof(err)) == -1
	      && !strcmp(err, "--migratable='yes' is not valid (a flag takes no value): use "
			 "--migratable without a value, together with --checkpoint=DIR"),
	      "migratable message: %s", err);
	free(s);
}

static void test_messages(void)
{
	char err[HETERO_ERR_MAX], *big = repeat('x', 10240);
	const char *want =
		"--accel='foo bar' is not valid (unexpected character at offset 3: "
		"byte 0x20): use MODEL[:N], VENDOR|STACK[:N], any[:N] or units=U, "
		"optionally followed by ,mem>=SIZE (e.g. a100-80gb:4, nvidia:2,mem>=80G)";

	hetero_check_accel("foo bar", err, sizeof(err));
	CHECK(!strcmp(err, want), "message:\n got %s\nwant %s", err, want);
	hetero_check_accel("h100:0", err, sizeof(err));
	CHECK(strstr(err, "(N must be an integer from 1 to 1024 at offset 5: '0')") != NULL,
	      "h100:0 message: %s", err);
	/* escape sequences and non-ASCII are shown as '?' */
	hetero_check_accel("\x1b[31mred\xc3\xa9", err, sizeof(err));
	CHECK(!strncmp(err, "--accel='?[31mred?" "?' ", 21) && printable(err),
	      "escape message: %s", esc(err));
	/* long values are cut at 64 chars */
	big[100] = ';';
	hetero_check_image(big, err, sizeof(err));
	CHECK(strstr(err, "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'")
	      && strlen(err) < 600, "long message: %s", err);
	free(big);
	/* the site list is named when a value is not on it */
	hetero_check_energy("turbo", &site.energy, err, sizeof(err));
	CHECK(strstr(err, "use one of performance, balanced, efficiency, auto") != NULL,
	      "energy list message: %s", err);
	hetero_check_tier("bronze", &site.tiers, err, sizeof(err));
	CHECK(strstr(err, "(not offered on this cluster): use one of diamond, gold, silver")
	      != NULL, "tier list message: %s", err);
	hetero_check_image("a//b", err, sizeof(err));
	CHECK(strstr(err, "(empty component at offset 2: '/')") != NULL,
	      "image message: %s", err);
	hetero_check_energy("9", NULL, err, sizeof(err));
	CHECK(strstr(err, "use a name made of a letter then up to 31 letters, digits, '_' or '-'")
	      != NULL, "energy syntax message: %s", err);
	hetero_check_arch("", err, sizeof(err));
	CHECK(strstr(err, "--arch='' is not valid (empty): use any, x86_64") == err,
	      "empty message: %s", err);
	/* tiny buffers stay NUL-terminated; a NULL buffer is fine */
	memset(err, 'z', 8);
	hetero_check_accel("bad value", err, 5);
	CHECK(!strcmp(err, "--ac"), "short buffer: %s", esc(err));
	CHECK(hetero_check_accel("bad value", NULL, 100) == -1, "NULL err");
	CHECK(hetero_check_accel("bad value", err, 0) == -1, "errlen 0");
}

static int conf_of(struct hetero_conf *c, const char *a0, const char *a1,
		   char *err, size_t errlen)
{
	char *argv[2] = { (char *)a0, (char *)a1 };

	return hetero_conf_parse(c, a1 ? 2 : a0 ? 1 : 0, argv, err, errlen);
}

static void conf_bad(const char *a0, const char *a1, const char *why)
{
	struct hetero_conf c;
	char err[HETERO_ERR_MAX] = "";
	int rc = conf_of(&c, a0, a1, err, sizeof(err));

	CHECK(rc == -1 && !c.energy.n && !c.tiers.n && strstr(err, why)
	      && !strncmp(err, "plugstack.conf argument '", 25) && printable(err),
	      "conf [%s] [%s]: rc %d, err %s", esc(a0), a1 ? a1 : "", rc, err);
}

static void test_conf(void)
{
	struct hetero_conf c;
	char err[HETERO_ERR_MAX] = "", many[64 * 40], *p;
	char *const none[] = { NULL };
	int i;

	CHECK(!hetero_conf_parse(&c, 0, NULL, err, sizeof(err)) && !c.energy.n
	      && !c.tiers.n, "no args: %s", err);
	CHECK(!conf_of(&c, "ENERGY=Auto,eco_1", "tiers=gold", err, sizeof(err))
	      && c.energy.n == 2 && !strcmp(c.energy.name[0], "auto")
	      && !strcmp(c.energy.name[1], "eco_1") && c.tiers.n == 1
	      && !strcmp(c.tiers.name[0], "gold"), "lists: %s", err);
	conf_bad("foo=bar", NULL, "unknown key; known keys are energy and tiers");
	conf_bad("energy=auto", "foo=bar", "unknown key");
	conf_bad("energy", NULL, "not key=value");
	conf_bad("", NULL, "empty argument");
	conf_bad("energy=", NULL, "must start with a letter");
	conf_bad("energy=a,,b", NULL, "must start with a letter at offset 9");
	conf_bad("energy=a,b,", NULL, "must start with a letter");
	conf_bad("energy=a,A", NULL, "listed twice");
	conf_bad("energy=a", "energy=b", "key given twice");
	conf_bad("tiers=gold silver", NULL, "unexpected character");
	conf_bad("tiers=gold;id", NULL, "unexpected character");
	conf_bad("tiers=\x1b[2J", NULL, "must start with a letter");
	conf_bad("tiers=a23456789012345678901234567890123", NULL, "longer than 32");
	CHECK(hetero_conf_parse(&c, 1, NULL, err, sizeof(err)) == -1, "argv NULL");
	CHECK(hetero_conf_parse(&c, 1, none, err, sizeof(err)) == -1, "argv[0] NULL");
	CHECK(hetero_conf_parse(&c, -1, none, err, sizeof(err)) == -1, "argc -1");
	/* 32 names fit, 33 do not */
	p = many + sprintf(many, "tiers=");
	for (i = 0; i < 33; i++)
		p += sprintf(p, "%st%d", i ? "," : "", i);
	conf_bad(many, NULL, "more than 32 names");
	*strrchr(many, ',') = '\0';
	CHECK(!conf_of(&c, many, NULL, err, sizeof(err)) && c.tiers.n == 32
	      && !strcmp(c.tiers.name[31], "t31"), "32 names: %s", err);
	/* a 32-name list of 32-char names still gives a whole message */
	p = many + sprintf(many, "energy=");
	for (i = 0; i < 32; i++)
		p += sprintf(p, "%sa%031d", i ? "," : "", i);
	CHECK(!conf_of(&c, many, NULL, err, sizeof(err)) && c.energy.n == 32,
	      "32 long names: %s", err);
	CHECK(hetero_check_energy("nope", &c.energy, err, sizeof(err)) == -1
	      && strstr(err, "a0000000000000000000000000000031") && printable(err),
	      "long list message: %s", err);
}

/* ---- the shared case file (tests/data/grammar/options.cases) -------------------------
 * The bridge (slurm_hetero/bridge/bridge.lua) runs the same cases in tests/lua; see the
 * file's header for its format. Every line is checked: accept/reject, the parsed meaning,
 * and on reject a clean one-line message. With --seeds DIR, each value is also written
 * as a libFuzzer input (byte 0: the entry point, byte 1: 0 = a full error buffer). */

#define CASE_LINE_MAX  4096
#define CASE_VALUE_MAX 20000
#define CASE_KEYS      8

struct case_kv {
	char key[16];
	char *val; /* malloc'ed */
};

struct case_file {
	const char *path;
	unsigned line, cases, seeds;
	const char *seed_dir;
	struct hetero_conf conf; /* from the last @lists */
};

static int case_error(struct case_file *f, const char *what)
{
	failed++;
	fprintf(stderr, "FAIL %s:%u: %s\n", f->path, f->line, what);
	return -1;
}

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A "quoted" string at *pp (escapes as in the file's header) into out; -1 if bad. */
static int quoted(const char **pp, char *out, size_t cap)
{
	const char *p = *pp;
	size_t n = 0;

	if (*p++ != '"')
		return -1;
	while (*p != '"') {
		int c = (unsigned char)*p++, h, l;
		unsigned long k;
		char *end;

		if (c == '\0' || c == '\n')
			return -1;
		if (c == '\\') {
			switch ((c = (unsigned char)*p++)) {
			case '\\': case '"': break;
			case 't': c = '\t'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 'e': c = 0x1b; break;
			case 'x':
				if ((h = hexval(p[0])) < 0 || (l = hexval(p[1])) < 0 || !(h | l))
					return -1;
				c = h * 16 + l;
				p += 2;
				break;
			case '{': /* the byte before, k times in all */
				k = strtoul(p, &end, 10);
				if (!n || end == p || *end != '}' || k < 1 || k > CASE_VALUE_MAX
				    || n + k - 1 >= cap)
					return -1;
				memset(out + n, out[n - 1], k - 1);
				n += k - 1;
				p = end + 1;
				continue;
			default:
				return -1;
			}
		}
		if (n + 1 >= cap)
			return -1;
		out[n++] = (char)c;
	}
	out[n] = '\0';
	*pp = p + 1;
	return 0;
}

/* A bare word (up to a blank) or a quoted string; malloc'ed copy or NULL. */
static char *word_or_quoted(const char **pp)
{
	char *out = malloc(CASE_VALUE_MAX + 1);
	size_t n;

	if (!out)
		abort();
	if (**pp == '"') {
		if (!quoted(pp, out, CASE_VALUE_MAX + 1)) {
			if (**pp && **pp != ' ' && **pp != '\t') {
				free(out);
				return NULL;
			}
			return out;
		}
		free(out);
		return NULL;
	}
	for (n = 0; (*pp)[n] && (*pp)[n] != ' ' && (*pp)[n] != '\t' && (*pp)[n] != '"'; n++)
		out[n] = (*pp)[n];
	out[n] = '\0';
	*pp += n;
	return out;
}

static const char *kv_get(struct case_kv *kv, int n, const char *key, const char *def,
			  int *used)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(kv[i].key, key)) {
			used[i] = 1;
			return kv[i].val;
		}
	return def;
}

static unsigned long long kv_num(struct case_file *f, struct case_kv *kv, int n,
				 const char *key, const char *def, int *used, int *bad)
{
	const char *v = kv_get(kv, n, key, def, used);
	char *end;
	unsigned long long x = strtoull(v, &end, 10);

	if (!*v || *end) {
		*bad = case_error(f, "a number is expected");
		return 0;
	}
	return x;
}

/* Writes one libFuzzer input: op, 0 (a full error buffer), then data. */
static void seed(struct case_file *f, int op, const char *data)
{
	char path[4096];
	FILE *out;

	if (!f->seed_dir)
		return;
	snprintf(path, sizeof(path), "%s/case-%04u", f->seed_dir, ++f->seeds);
	if (!(out = fopen(path, "wb"))) {
		perror(path);
		exit(2);
	}
	fputc(op, out);
	fputc(0, out);
	fputs(data, out);
	if (fclose(out)) {
		perror(path);
		exit(2);
	}
}

/* @lists ARG...: plugstack.conf arguments, as hetero_conf_parse takes them. */
static void case_lists(struct case_file *f, const char *p)
{
	char *argv[8], err[HETERO_ERR_MAX], joined[CASE_LINE_MAX] = "";
	int argc = 0, i;

	for (p = skip_ws(p); *p && argc < 8; p = skip_ws(p)) {
		if (!(argv[argc] = word_or_quoted(&p)) || !*argv[argc]) {
			free(argv[argc]);
			case_error(f, "bad @lists argument");
			goto out;
		}
		strncat(joined, argc ? " " : "", sizeof(joined) - strlen(joined) - 1);
		strncat(joined, argv[argc], sizeof(joined) - strlen(joined) - 1);
		argc++;
	}
	if (*p) {
		case_error(f, "more than 8 @lists arguments");
		goto out;
	}
	if (hetero_conf_parse(&f->conf, argc, argv, err, sizeof(err))) {
		case_error(f, err);
		goto out;
	}
	if (argc)
		seed(f, 6, joined);
out:
	for (i = 0; i < argc; i++)
		free(argv[i]);
}

/* Checks one case against the C parsers; the meaning keys must all be known. */
static void case_check(struct case_file *f, const char *opt, const char *v, int ok,
		       struct case_kv *kv, int nkv)
{
	char err[HETERO_ERR_MAX] = "", head[32], got[512] = "", want[512] = "";
	int used[CASE_KEYS] = { 0 }, rc = -2, bad = 0, i;

	if (!strcmp(opt, "accel")) {
		struct hetero_accel a;
		const char *kind = kv_get(kv, nkv, "kind", "", used);
		int units = !strcmp(kind, "units");
		unsigned long long count, milli, mem;

		rc = hetero_parse_accel(v, &a, err, sizeof(err));
		seed(f, 0, v);
		if (ok) {
			count = kv_num(f, kv, nkv, "count", units ? "0" : "1", used, &bad);
			milli = kv_num(f, kv, nkv, "units_milli", "0", used, &bad);
			mem = kv_num(f, kv, nkv, "mem_mib", "0", used, &bad);
			snprintf(want, sizeof(want), "kind=%s name=%s count=%llu units_milli=%llu mem_mib=%llu",
				 kind, kv_get(kv, nkv, "name", "", used), count, milli, mem);
		}
		if (!rc)
			snprintf(got, sizeof(got), "kind=%s name=%s count=%u units_milli=%u mem_mib=%llu",
				 a.kind == HETERO_ACCEL_NAME ? "name" : a.kind == HETERO_ACCEL_ANY
				 ? "any" : "units", a.name, a.count, (unsigned)a.units_milli,
				 (unsigned long long)a.mem_mib);
	} else if (!strcmp(opt, "arch")) {
		enum hetero_arch arch;

		rc = hetero_parse_arch(v, &arch, err, sizeof(err));
		seed(f, 1, v);
		if (ok)
			snprintf(want, sizeof(want), "arch=%s", kv_get(kv, nkv, "arch", "", used));
		if (!rc)
			snprintf(got, sizeof(got), "arch=%s", hetero_arch_name(arch));
	} else if (!strcmp(opt, "energy") || !strcmp(opt, "tier")) {
		char name[HETERO_POLICY_MAX + 1];

		if (opt[0] == 'e') {
			rc = hetero_parse_energy(v, &f->conf.energy, name, err, sizeof(err));
			seed(f, f->conf.energy.n ? 5 : 2, v);
		} else {
			rc = hetero_parse_tier(v, &f->conf.tiers, name, err, sizeof(err));
			seed(f, 3, v);
		}
		if (ok)
			snprintf(want, sizeof(want), "name=%s", kv_get(kv, nkv, "name", "", used));
		if (!rc)
			snprintf(got, sizeof(got), "name=%s", name);
	} else if (!strcmp(opt, "image")) {
		struct hetero_image img;

		rc = hetero_parse_image(v, &img, err, sizeof(err));
		seed(f, 4, v);
		if (ok)
			snprintf(want, sizeof(want), "name=%s tag=%s",
				 kv_get(kv, nkv, "name", "", used), kv_get(kv, nkv, "tag", "", used));
		if (!rc)
			snprintf(got, sizeof(got), "name=%s tag=%s", img.name, img.tag);
	} else if (!strcmp(opt, "checkpoint")) {
		char dir[HETERO_VALUE_MAX + 1] = "";

		rc = hetero_parse_checkpoint(v, dir, err, sizeof(err));
		seed(f, 7, v);
		if (ok)
			snprintf(want, sizeof(want), "path=%s", kv_get(kv, nkv, "path", "", used));
		if (!rc)
			snprintf(got, sizeof(got), "path=%s", dir);
	} else if (!strcmp(opt, "migratable")) {
		rc = hetero_check_migratable(v, err, sizeof(err));
		seed(f, 8, v);
	} else {
		case_error(f, "unknown option (accel, arch, energy, tier, image, checkpoint or "
			   "migratable)");
		return;
	}
	for (i = 0; i < nkv; i++)
		if (!used[i])
			bad = case_error(f, "a meaning key this option does not have");
	if (bad)
		return;
	f->cases++;
	CHECK(rc == (ok ? 0 : -1), "%s:%u: --%s='%s': want %s, got %d (%s)", f->path, f->line,
	      opt, esc(v), ok ? "accept" : "reject", rc, err);
	if (ok && !rc)
		CHECK(!strcmp(got, want), "%s:%u: --%s='%s':\n  got  %.200s\n  want %.200s",
		      f->path, f->line, opt, esc(v), got, want);
	if (!ok && rc == -1) {
		snprintf(head, sizeof(head), "--%s='", opt);
		CHECK(!strncmp(err, head, strlen(head)) && strstr(err, "): use ")
		      && printable(err) && strlen(err) < 1400,
		      "%s:%u: --%s='%s': bad message: %s", f->path, f->line, opt, esc(v), err);
	}
}

static void case_line(struct case_file *f, const char *p)
{
	struct case_kv kv[CASE_KEYS];
	char opt[16], res[16], *v = NULL;
	int nkv = 0, ok, i;
	size_t n;

	for (n = 0; p[n] && p[n] != ' ' && p[n] != '\t'; n++)
		;
	if (n == 0 || n >= sizeof(opt)) {
		case_error(f, "OPTION expected");
		return;
	}
	memcpy(opt, p, n);
	opt[n] = '\0';
	p = skip_ws(p + n);
	if (*p != '"' || !(v = word_or_quoted(&p))) {
		case_error(f, "a \"quoted\" VALUE expected (see the escapes in the file's header)");
		return;
	}
	p = skip_ws(p);
	for (n = 0; p[n] && p[n] != ' ' && p[n] != '\t'; n++)
		;
	if (n >= sizeof(res) || (memcpy(res, p, n), res[n] = '\0',
				 strcmp(res, "ok") && strcmp(res, "reject"))) {
		case_error(f, "RESULT must be ok or reject");
		goto out;
	}
	ok = !strcmp(res, "ok");
	for (p = skip_ws(p + n); *p; p = skip_ws(p)) {
		const char *eq = strchr(p, '=');

		if (!ok || nkv == CASE_KEYS || !eq || eq == p || (size_t)(eq - p) >= sizeof(kv[0].key)
		    || memchr(p, ' ', (size_t)(eq - p))) {
			case_error(f, ok ? "KEY=VALUE expected" : "a rejected case has no meaning");
			goto out;
		}
		memcpy(kv[nkv].key, p, (size_t)(eq - p));
		kv[nkv].key[eq - p] = '\0';
		p = eq + 1;
		if (!(kv[nkv].val = word_or_quoted(&p))) {
			case_error(f, "bad VALUE of a key");
			goto out;
		}
		for (i = 0; i < nkv; i++)
			if (!strcmp(kv[i].key, kv[nkv].key)) {
				free(kv[nkv].val);
				case_error(f, "a key given twice");
				goto out;
			}
		nkv++;
	}
	case_check(f, opt, v, ok, kv, nkv);
out:
	for (i = 0; i < nkv; i++)
		free(kv[i].val);
	free(v);
}

/* Runs every case of the file; returns how many there were. */
static unsigned test_case_file(const char *path, const char *seed_dir)
{
	struct case_file f = { path, 0, 0, 0, seed_dir, { { 0 }, { 0 } } };
	char line[CASE_LINE_MAX];
	FILE *in = fopen(path, "r");

	if (!in) {
		perror(path);
		exit(2);
	}
	while (fgets(line, sizeof(line), in)) {
		size_t n = strlen(line);
		const char *p;

		f.line++;
		if (n && line[n - 1] == '\n')
			line[--n] = '\0';
		else if (!feof(in)) {
			case_error(&f, "line too long");
			break;
		}
		while (n && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r'))
			line[--n] = '\0';
		p = skip_ws(line);
		if (!*p || *p == '#')
			continue;
		if (!strncmp(p, "@lists", 6) && (!p[6] || p[6] == ' ' || p[6] == '\t'))
			case_lists(&f, p + 6);
		else if (*p == '@')
			case_error(&f, "unknown directive (only @lists)");
		else
			case_line(&f, p);
	}
	fclose(in);
	if (f.cases < 100)
		case_error(&f, "fewer than 100 cases: is this the case file?");
	return f.cases;
}

static int usage(const char *prog)
{
	fprintf(stderr, "usage: %s [--seeds DIR] CASEFILE\n"
		"  CASEFILE: tests/data/grammar/options.cases (make -C spank test passes it)\n"
		"  --seeds DIR: also write each case as a libFuzzer input into DIR\n", prog);
	return 2;
}

int main(int argc, char **argv)
{
	char *conf_argv[] = { "energy=performance,balanced,efficiency,auto",
			      "tiers=diamond,gold,silver" };
	char err[HETERO_ERR_MAX] = "";
	const char *seed_dir = NULL;
	unsigned ncases;

	if (argc == 4 && !strcmp(argv[1], "--seeds"))
		seed_dir = argv[2];
	else if (argc != 2 || argv[1][0] == '-')
		return usage(argv[0]);
	if (hetero_conf_parse(&site, 2, conf_argv, err, sizeof(err))) {
		fprintf(stderr, "site conf: %s\n", err);
		return 1;
	}
	ncases = test_case_file(argv[argc - 1], seed_dir);
	test_lengths();
	test_accel_struct();
	test_arch_parse();
	test_image_parse();
	test_checkpoint_and_flag();
	test_messages();
	test_conf();
	printf("%d passed, %d failed (%u cases from %s)\n", passed, failed, ncases, argv[argc - 1]);
	return failed ? 1 : 0;
}
