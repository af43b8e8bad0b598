/*
 * test_opts.c - table-driven unit tests of hetero_opts.c, built without Slurm
 * (plain and with -fsanitize=address,undefined by `make test`).
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

struct tc {
	enum which w;
	const char *v;
	int ok;
};

static const struct tc cases[] = {
	/* accel: every form */
	{ ACCEL, "a100-80gb:4", 1 }, { ACCEL, "nvidia:2", 1 }, { ACCEL, "cann:8", 1 },
	{ ACCEL, "h100", 1 }, { ACCEL, "any", 1 }, { ACCEL, "any:8", 1 },
	{ ACCEL, "units=2", 1 }, { ACCEL, "units=2.5", 1 }, { ACCEL, "units=0.5", 1 },
	{ ACCEL, "nvidia:2,mem>=80G", 1 }, { ACCEL, "h100,mem>=80GB", 1 },
	{ ACCEL, "any,mem>=1T", 1 }, { ACCEL, "units=2,mem>=512M", 1 },
	{ ACCEL, "h100,mem>=512", 1 }, { ACCEL, "h100,mem>=1K", 1 },
	{ ACCEL, "h100,mem>=1kb", 1 }, { ACCEL, "a.b_c-d", 1 }, { ACCEL, "9", 1 },
	{ ACCEL, "units", 1 }, /* a NAME; the bridge says no such model */
	/* accel: case-insensitive */
	{ ACCEL, "A100-80GB:4", 1 }, { ACCEL, "ANY:2", 1 }, { ACCEL, "Units=1.5", 1 },
	{ ACCEL, "h100,MEM>=80gb", 1 }, { ACCEL, "h100,Mem>=1Tb", 1 },
	/* accel: N boundaries and shapes */
	{ ACCEL, "h100:1", 1 }, { ACCEL, "h100:1024", 1 }, { ACCEL, "any:1024", 1 },
	{ ACCEL, "h100:0", 0 }, { ACCEL, "h100:1025", 0 }, { ACCEL, "any:0", 0 },
	{ ACCEL, "h100:01", 0 }, { ACCEL, "h100:00", 0 }, { ACCEL, "h100:+1", 0 },
	{ ACCEL, "h100:-1", 0 }, { ACCEL, "h100:", 0 }, { ACCEL, "h100::4", 0 },
	{ ACCEL, "h100:4:4", 0 }, { ACCEL, "h100:1.5", 0 }, { ACCEL, ":4", 0 },
	{ ACCEL, "h100:99999999999999999999999", 0 }, { ACCEL, "h100:0x10", 0 },
	/* accel: units boundaries */
	{ ACCEL, "units=0.001", 1 }, { ACCEL, "units=100000", 1 },
	{ ACCEL, "units=100000.000", 1 }, { ACCEL, "units=0", 0 },
	{ ACCEL, "units=0.0", 0 }, { ACCEL, "units=0.000", 0 },
	{ ACCEL, "units=0.0001", 0 }, { ACCEL, "units=100000.001", 0 },
	{ ACCEL, "units=100001", 0 }, { ACCEL, "units=", 0 }, { ACCEL, "units=.5", 0 },
	{ ACCEL, "units=5.", 0 }, { ACCEL, "units=-1", 0 }, { ACCEL, "units=+1", 0 },
	{ ACCEL, "units=1e3", 0 }, { ACCEL, "units=01", 0 }, { ACCEL, "units=2:4", 0 },
	{ ACCEL, "units=2,5", 0 }, { ACCEL, "units==2", 0 },
	/* accel: mem boundaries */
	{ ACCEL, "h100,mem>=0", 0 }, { ACCEL, "h100,mem>=0G", 0 }, { ACCEL, "h100,mem>=", 0 },
	{ ACCEL, "h100,mem>=1048576T", 1 }, { ACCEL, "h100,mem>=1048577T", 0 },
	{ ACCEL, "h100,mem>=99999999999999999999999G", 0 },
	{ ACCEL, "h100,mem>=80GiB", 0 }, { ACCEL, "h100,mem>=80B", 0 },
	{ ACCEL, "h100,mem>=80P", 0 }, { ACCEL, "h100,mem>=080G", 0 },
	{ ACCEL, "h100,mem>=1.5G", 0 }, { ACCEL, "h100,mem>80G", 0 },
	{ ACCEL, "h100,mem=80G", 0 }, { ACCEL, "h100,mem>=80G,", 0 },
	{ ACCEL, "h100,mem>=80G,mem>=1G", 0 }, { ACCEL, "h100,", 0 },
	{ ACCEL, "h100,foo", 0 }, { ACCEL, "mem>=80G", 0 }, { ACCEL, ",mem>=80G", 0 },
	/* accel: hostile */
	{ ACCEL, "", 0 }, { ACCEL, "foo bar", 0 }, { ACCEL, ";rm -rf /", 0 },
	{ ACCEL, "h100;rm -rf /", 0 }, { ACCEL, "$(id)", 0 }, { ACCEL, "h100$(id)", 0 },
	{ ACCEL, "`id`", 0 }, { ACCEL, "h100`id`", 0 }, { ACCEL, "h100\n", 0 },
	{ ACCEL, "h100\nany", 0 }, { ACCEL, " h100", 0 }, { ACCEL, "h100 ", 0 },
	{ ACCEL, "h100\t", 0 }, { ACCEL, "a100\xc3\xa9", 0 }, { ACCEL, "\xc3\xa9", 0 },
	{ ACCEL, "h100|x", 0 }, { ACCEL, "h100&", 0 }, { ACCEL, "h100>x", 0 },
	{ ACCEL, "*", 0 }, { ACCEL, "-h100", 0 }, { ACCEL, ".h100", 0 },
	{ ACCEL, "_h100", 0 }, { ACCEL, "\x1b[31mred", 0 }, { ACCEL, "h100\x7f", 0 },
	{ ACCEL, "'h100'", 0 }, { ACCEL, "\"h100\"", 0 }, { ACCEL, "h100\\", 0 },
	{ ACCEL, "../h100", 0 }, { ACCEL, "h100/x", 0 },

	/* arch */
	{ ARCH, "any", 1 }, { ARCH, "x86_64", 1 }, { ARCH, "aarch64", 1 },
	{ ARCH, "arm64", 1 }, { ARCH, "armv8", 1 }, { ARCH, "ANY", 1 },
	{ ARCH, "X86_64", 1 }, { ARCH, "AArch64", 1 }, { ARCH, "ARMV8", 1 },
	{ ARCH, "x86-64", 0 }, { ARCH, "amd64", 0 }, { ARCH, "arm", 0 },
	{ ARCH, "armv8l", 0 }, { ARCH, "x86_6", 0 }, { ARCH, "", 0 },
	{ ARCH, "x86_64 ", 0 }, { ARCH, "aarch64\n", 0 }, { ARCH, "$(uname -m)", 0 },
	{ ARCH, "x86_64;id", 0 }, { ARCH, "\xc3\xa1rm64", 0 },

	/* energy / tier: syntax only (no plugstack list) */
	{ ENERGY, "balanced", 1 }, { ENERGY, "Balanced", 1 }, { ENERGY, "a", 1 },
	{ ENERGY, "x_y-z9", 1 }, { ENERGY, "turbo", 1 }, { ENERGY, "9x", 0 },
	{ ENERGY, "-x", 0 }, { ENERGY, "_x", 0 }, { ENERGY, "a.b", 0 },
	{ ENERGY, "a b", 0 }, { ENERGY, "", 0 }, { ENERGY, "a,b", 0 },
	{ ENERGY, ";id", 0 }, { ENERGY, "auto\n", 0 }, { ENERGY, "\xc3\xa9" "co", 0 },
	{ TIER, "gold", 1 }, { TIER, "GOLD", 1 }, { TIER, "bronze", 1 },
	{ TIER, "gold!", 0 }, { TIER, "", 0 }, { TIER, "`id`", 0 }, { TIER, "1st", 0 },
	/* energy / tier: with the plugstack lists */
	{ ENERGY_L, "performance", 1 }, { ENERGY_L, "AUTO", 1 },
	{ ENERGY_L, "Efficiency", 1 }, { ENERGY_L, "turbo", 0 },
	{ ENERGY_L, "auto2", 0 }, { ENERGY_L, "aut", 0 }, { ENERGY_L, "", 0 },
	{ TIER_L, "diamond", 1 }, { TIER_L, "Gold", 1 }, { TIER_L, "silver", 1 },
	{ TIER_L, "bronze", 0 }, { TIER_L, "gold ", 0 }, { TIER_L, "$(id)", 0 },

	/* image */
	{ IMAGE, "pytorch:24.05", 1 }, { IMAGE, "nvidia/pytorch:24.05-py3", 1 },
	{ IMAGE, "nvcr.io/nvidia/pytorch:24.05-py3", 1 }, { IMAGE, "ubuntu", 1 },
	{ IMAGE, "PyTorch:Latest", 1 }, { IMAGE, "a:_x", 1 }, { IMAGE, "a:T", 1 },
	{ IMAGE, "a.b/c_d/e-f:1.2.3", 1 }, { IMAGE, "a..b", 1 }, { IMAGE, "9/9:9", 1 },
	{ IMAGE, "../x", 0 }, { IMAGE, "/abs", 0 }, { IMAGE, "/abs/x:1", 0 },
	{ IMAGE, "a//b", 0 }, { IMAGE, "a/./b", 0 }, { IMAGE, "a/../b", 0 },
	{ IMAGE, "a/..", 0 }, { IMAGE, "a/", 0 }, { IMAGE, "a/.", 0 }, { IMAGE, ".", 0 },
	{ IMAGE, "..", 0 }, { IMAGE, ".x", 0 }, { IMAGE, "a/-b", 0 }, { IMAGE, "a:", 0 },
	{ IMAGE, "a:.x", 0 }, { IMAGE, "a:-x", 0 }, { IMAGE, "a::b", 0 },
	{ IMAGE, "a:b:c", 0 }, { IMAGE, "a:b/c", 0 }, { IMAGE, ":tag", 0 },
	{ IMAGE, "a/:tag", 0 }, { IMAGE, "a@sha256:abc", 0 },
	{ IMAGE, "localhost:5000/x", 0 }, { IMAGE, "", 0 }, { IMAGE, "a b", 0 },
	{ IMAGE, "a;b", 0 }, { IMAGE, "$(id)", 0 }, { IMAGE, "`id`", 0 },
	{ IMAGE, "a\tb", 0 }, { IMAGE, "a:tag\n", 0 }, { IMAGE, "caf\xc3\xa9", 0 },
	{ IMAGE, "a\\b", 0 }, { IMAGE, "~/img", 0 },
};

static void test_table(void)
{
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect(cases[i].w, cases[i].v, cases[i].ok);
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

int main(void)
{
	char *argv[] = { "energy=performance,balanced,efficiency,auto",
			 "tiers=diamond,gold,silver" };
	char err[HETERO_ERR_MAX] = "";

	if (hetero_conf_parse(&site, 2, argv, err, sizeof(err))) {
		fprintf(stderr, "site conf: %s\n", err);
		return 1;
	}
	test_table();
	test_lengths();
	test_accel_struct();
	test_arch_parse();
	test_messages();
	test_conf();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
