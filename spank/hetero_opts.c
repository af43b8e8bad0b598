/*
 * hetero_opts.c - syntax checks for the hetero SPANK plugin (see hetero_opts.h).
 *
 * Hand-written scanners instead of regex(3) or ctype(3): both depend on the
 * locale of the user's shell, and these rules must be plain ASCII everywhere.
 */
#include "hetero_opts.h"

#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

#define ACCEL_FORMS "MODEL[:N], VENDOR|STACK[:N], any[:N] or units=U, " \
	"optionally followed by ,mem>=SIZE (e.g. a100-80gb:4, nvidia:2,mem>=80G)"
#define ARCH_FORMS "any, x86_64 or aarch64 (aliases arm64, armv8)"
/* "31" is HETERO_POLICY_MAX - 1, which STR() cannot compute. */
_Static_assert(HETERO_POLICY_MAX == 32, "update NAME_RULE");
#define NAME_RULE "a letter then up to 31 letters, digits, '_' or '-'"
#define POLICY_FORMS "a name made of " NAME_RULE
#define IMAGE_FORMS "NAME[:TAG], NAME being '/'-separated components of " \
	"letters, digits, '.', '_' or '-' that start with a letter or digit " \
	"(e.g. pytorch:24.05, nvidia/pytorch:24.05-py3)"
#define CHECKPOINT_FORMS "an absolute path of printable ASCII without " \
	"whitespace or '..' components, at most " STR(HETERO_VALUE_MAX) \
	" bytes (e.g. /shared/ckpt/run1)"
#define MIGRATABLE_FORMS "--migratable without a value, together with " \
	"--checkpoint=DIR"
#define CONF_FORMS "energy=NAME[,NAME...] and tiers=NAME[,NAME...] with up " \
	"to " STR(HETERO_LIST_MAX) " names, each made of " NAME_RULE

/* Why a value was refused, and where (at may be NULL). */
struct bad {
	const char *why;
	const char *at;
};

static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_alnum(int c) { return is_alpha(c) || is_digit(c); }
/* [A-Za-z0-9._-]: names of models, image components, tags */
static int is_word(int c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; }
/* [A-Za-z0-9_-]: energy policies and tiers */
static int is_pol(int c) { return is_alnum(c) || c == '_' || c == '-'; }
static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

static int eq_ci(const char *a, const char *b)
{
	for (; *a && lower(*a) == lower(*b); a++, b++)
		;
	return lower(*a) == lower(*b);
}

/* Length of pre when s starts with it (ignoring case), else 0. */
static size_t prefix_ci(const char *s, const char *pre)
{
	size_t n;

	for (n = 0; pre[n]; n++)
		if (lower(s[n]) != pre[n]) /* s[n] == 0 stops here too */
			return 0;
	return n;
}

static const char *oops(struct bad *b, const char *why, const char *at)
{
	b->why = why;
	b->at = at;
	return NULL;
}

/* Checks shared by every option; returns the reason or NULL. */
static const char *common(const char *v)
{
	size_t n;

	if (!v)
		return "no value";
	n = strnlen(v, HETERO_VALUE_MAX + 1);
	if (n == 0)
		return "empty";
	if (n > HETERO_VALUE_MAX)
		return "longer than " STR(HETERO_VALUE_MAX) " bytes";
	return NULL;
}

/* Echo at most HETERO_SHOW_MAX printable ASCII chars; the rest become '?'
 * so that escape sequences in hostile input never reach a terminal. */
static void show(const char *v, char out[HETERO_SHOW_MAX + 4])
{
	size_t i;

	for (i = 0; v && v[i] && i < HETERO_SHOW_MAX; i++) {
		unsigned char c = (unsigned char)v[i];
		out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	if (v && v[i])
		memcpy(out + i, "...", 4);
	else
		out[i] = '\0';
}

static void fail(char *err, size_t errlen, const char *what, const char *v,
		 const struct bad *b, const char *forms)
{
	char shown[HETERO_SHOW_MAX + 4], where[64] = "";

	if (!err || !errlen)
		return;
	show(v, shown);
	if (b->at) {
		size_t off = (size_t)(b->at - v);
		unsigned char c = (unsigned char)*b->at;

		if (c > 0x20 && c < 0x7f)
			snprintf(where, sizeof(where), " at offset %zu: '%c'", off, c);
		else if (c)
			snprintf(where, sizeof(where), " at offset %zu: byte 0x%02x", off, c);
		else
			snprintf(where, sizeof(where), " at offset %zu: end of value", off);
	}
	snprintf(err, errlen, "%s'%s' is not valid (%s%s): use %s",
		 what, shown, b->why, where, forms);
}

/* Unsigned decimal without sign or leading zeros, within [min, max]
 * (max < UINT64_MAX / 10). Returns the end of the number or NULL. */
static const char *parse_uint(const char *p, uint64_t min, uint64_t max,
			      uint64_t *out)
{
	uint64_t n = 0;

	if (!is_digit(*p) || (p[0] == '0' && is_digit(p[1])))
		return NULL;
	for (; is_digit(*p); p++) {
		n = n * 10 + (uint64_t)(*p - '0');
		if (n > max)
			return NULL;
	}
	if (n < min)
		return NULL;
	*out = n;
	return p;
}

/* U of units=U: positive, <= HETERO_UNITS_MAX, <= 3 decimals; kept as
 * thousandths so no float rounding reaches the bridge. */
static const char *parse_units(const char *p, uint32_t *milli, struct bad *b)
{
	uint64_t whole, frac = 0;
	const char *q = parse_uint(p, 0, HETERO_UNITS_MAX, &whole);
	int k;

	if (!q)
		return oops(b, "U must be a decimal number from 0.001 to "
			    STR(HETERO_UNITS_MAX), p);
	if (*q == '.') {
		if (!is_digit(*++q))
			return oops(b, "a digit must follow '.'", q);
		for (k = 0; is_digit(*q); q++, k++) {
			if (k == HETERO_UNITS_DECIMALS)
				return oops(b, "U has more than "
					    STR(HETERO_UNITS_DECIMALS) " decimals", q);
			frac = frac * 10 + (uint64_t)(*q - '0');
		}
		for (; k < HETERO_UNITS_DECIMALS; k++)
			frac *= 10;
	}
	whole = whole * 1000 + frac;
	if (whole == 0)
		return oops(b, "U must be positive", p);
	if (whole > (uint64_t)HETERO_UNITS_MAX * 1000)
		return oops(b, "U must be at most " STR(HETERO_UNITS_MAX), p);
	*milli = (uint32_t)whole;
	return q;
}

/* SIZE of mem>=SIZE: integer >= 1, optional K|M|G|T then optional B;
 * no unit means MiB. Stored in MiB, K rounded up so mem>=1K still asks. */
static const char *parse_size(const char *p, uint64_t *mib, struct bad *b)
{
	uint64_t n;
	unsigned shift = 0;
	const char *q = parse_uint(p, 1, HETERO_MEM_MAX_MIB << 10, &n);

	if (!q)
		return oops(b, "SIZE must be an integer from 1 with an optional "
			    "unit K, M, G or T", p);
	switch (lower(*q)) {
	case 'k':
		n = (n + 1023) >> 10;
		break;
	case 'm':
		break;
	case 'g':
		shift = 10;
		break;
	case 't':
		shift = 20;
		break;
	default:
		goto done;
	}
	if (lower(*++q) == 'b')
		q++;
done:
	if (n > (HETERO_MEM_MAX_MIB >> shift))
		return oops(b, "SIZE is too large", p);
	*mib = n << shift;
	return q;
}

int hetero_parse_accel(const char *v, struct hetero_accel *out,
		       char *err, size_t errlen)
{
	struct hetero_accel a;
	struct bad b = { NULL, NULL };
	const char *p = v;
	uint64_t u;
	size_t n, k;

	memset(&a, 0, sizeof(a));
	if ((b.why = common(v)))
		goto bad;
	if ((k = prefix_ci(p, "units="))) {
		a.kind = HETERO_ACCEL_UNITS;
		if (!(p = parse_units(p + k, &a.units_milli, &b)))
			goto bad;
	} else {
		if (!is_alnum(*p)) {
			oops(&b, "NAME must start with a letter or digit", p);
			goto bad;
		}
		for (n = 0; is_word(p[n]); n++) {
			if (n == HETERO_ACCEL_NAME_MAX) {
				oops(&b, "NAME is longer than "
				     STR(HETERO_ACCEL_NAME_MAX) " characters", p + n);
				goto bad;
			}
			a.name[n] = lower(p[n]);
		}
		p += n;
		a.count = 1;
		if (!strcmp(a.name, "any")) {
			a.kind = HETERO_ACCEL_ANY;
			a.name[0] = '\0';
		}
		if (*p == ':') {
			const char *q = parse_uint(p + 1, 1, HETERO_COUNT_MAX, &u);

			if (!q) {
				oops(&b, "N must be an integer from 1 to "
				     STR(HETERO_COUNT_MAX), p + 1);
				goto bad;
			}
			a.count = (unsigned)u;
			p = q;
		}
	}
	if (*p == ',') {
		if (!(k = prefix_ci(p + 1, "mem>="))) {
			oops(&b, "only ,mem>=SIZE may follow", p + 1);
			goto bad;
		}
		if (!(p = parse_size(p + 1 + k, &a.mem_mib, &b)))
			goto bad;
	}
	if (*p) {
		oops(&b, "unexpected character", p);
		goto bad;
	}
	if (out)
		*out = a;
	return 0;
bad:
	fail(err, errlen, "--accel=", v, &b, ACCEL_FORMS);
	return -1;
}

int hetero_check_accel(const char *v, char *err, size_t errlen)
{
	return hetero_parse_accel(v, NULL, err, errlen);
}

static const struct {
	const char *name;
	enum hetero_arch arch;
} arches[] = {
	{ "any", HETERO_ARCH_ANY },
	{ "x86_64", HETERO_ARCH_X86_64 },
	{ "aarch64", HETERO_ARCH_AARCH64 },
	{ "arm64", HETERO_ARCH_AARCH64 },
	{ "armv8", HETERO_ARCH_AARCH64 },
};

int hetero_parse_arch(const char *v, enum hetero_arch *out,
		      char *err, size_t errlen)
{
	struct bad b = { NULL, NULL };
	size_t i;

	if ((b.why = common(v)))
		goto bad;
	for (i = 0; i < sizeof(arches) / sizeof(arches[0]); i++) {
		if (eq_ci(v, arches[i].name)) {
			if (out)
				*out = arches[i].arch;
			return 0;
		}
	}
	b.why = "unknown architecture";
bad:
	fail(err, errlen, "--arch=", v, &b, ARCH_FORMS);
	return -1;
}

int hetero_check_arch(const char *v, char *err, size_t errlen)
{
	return hetero_parse_arch(v, NULL, err, errlen);
}

const char *hetero_arch_name(enum hetero_arch a)
{
	switch (a) {
	case HETERO_ARCH_ANY:
		return "any";
	case HETERO_ARCH_X86_64:
		return "x86_64";
	case HETERO_ARCH_AARCH64:
		return "aarch64";
	}
	return "?";
}

static int in_list(const struct hetero_list *l, const char *name)
{
	unsigned i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->name[i], name))
			return 1;
	return 0;
}

/* Scans one energy policy / tier name into low (lower-cased); returns the
 * end of the name or NULL. Used for option values and plugstack lists. */
static const char *scan_name(const char *p, char low[HETERO_POLICY_MAX + 1],
			     struct bad *b)
{
	size_t n;

	if (!is_alpha(*p))
		return oops(b, "a name must start with a letter", p);
	for (n = 0; is_pol(p[n]); n++) {
		if (n == HETERO_POLICY_MAX)
			return oops(b, "a name is longer than "
				    STR(HETERO_POLICY_MAX) " characters", p + n);
		low[n] = lower(p[n]);
	}
	low[n] = '\0';
	return p + n;
}

/* energy and tier share the rules; only the option name and list differ. */
static int check_listed(const char *what, const char *v,
			const struct hetero_list *allowed,
			char out[HETERO_POLICY_MAX + 1], char *err, size_t errlen)
{
	char low[HETERO_POLICY_MAX + 1], forms[HETERO_LIST_MAX * (HETERO_POLICY_MAX + 2) + 16];
	struct bad b = { NULL, NULL };
	const char *p;
	size_t len;
	unsigned i;

	if ((b.why = common(v)))
		goto bad;
	if (!(p = scan_name(v, low, &b)))
		goto bad;
	if (*p) {
		oops(&b, "unexpected character", p);
		goto bad;
	}
	if (!allowed || !allowed->n || in_list(allowed, low)) {
		if (out)
			memcpy(out, low, sizeof(low));
		return 0;
	}
	b.why = "not offered on this cluster";
bad:
	if (!allowed || !allowed->n) {
		fail(err, errlen, what, v, &b, POLICY_FORMS);
		return -1;
	}
	/* Listed names are at most 32 [a-z0-9_-] chars, so forms always fits. */
	len = (size_t)snprintf(forms, sizeof(forms), "one of");
	for (i = 0; i < allowed->n; i++)
		len += (size_t)snprintf(forms + len, sizeof(forms) - len, "%s %s",
					i ? "," : "", allowed->name[i]);
	fail(err, errlen, what, v, &b, forms);
	return -1;
}

int hetero_parse_energy(const char *v, const struct hetero_list *allowed,
			char out[HETERO_POLICY_MAX + 1], char *err, size_t errlen)
{
	return check_listed("--energy=", v, allowed, out, err, errlen);
}

int hetero_parse_tier(const char *v, const struct hetero_list *allowed,
		      char out[HETERO_POLICY_MAX + 1], char *err, size_t errlen)
{
	return check_listed("--tier=", v, allowed, out, err, errlen);
}

int hetero_check_energy(const char *v, const struct hetero_list *allowed,
			char *err, size_t errlen)
{
	return hetero_parse_energy(v, allowed, NULL, err, errlen);
}

int hetero_check_tier(const char *v, const struct hetero_list *allowed,
		      char *err, size_t errlen)
{
	return hetero_parse_tier(v, allowed, NULL, err, errlen);
}

int hetero_parse_image(const char *v, struct hetero_image *out,
		       char *err, size_t errlen)
{
	struct bad b = { NULL, NULL };
	const char *p = v, *tag = NULL;
	size_t n;

	if ((b.why = common(v)))
		goto bad;
	if (*p == '/') {
		oops(&b, "absolute paths are not allowed", p);
		goto bad;
	}
	for (;;) { /* NAME: component ('/' component)* */
		if (*p == '.') {
			oops(&b, "a component may not start with '.'", p);
			goto bad;
		}
		if (*p == '/' || *p == ':' || !*p) {
			oops(&b, "empty component", p);
			goto bad;
		}
		if (!is_alnum(*p)) {
			oops(&b, "a component must start with a letter or digit", p);
			goto bad;
		}
		while (is_word(*p))
			p++;
		if (*p != '/')
			break;
		p++;
	}
	if (*p == ':') {
		tag = ++p;
		if (!is_alnum(*p) && *p != '_') {
			oops(&b, "TAG must start with a letter, digit or '_'", p);
			goto bad;
		}
		for (n = 0; is_word(p[n]); n++) {
			if (n == HETERO_TAG_MAX) {
				oops(&b, "TAG is longer than " STR(HETERO_TAG_MAX)
				     " characters", p + n);
				goto bad;
			}
		}
		p += n;
	}
	if (*p) {
		oops(&b, "unexpected character", p);
		goto bad;
	}
	if (out) { /* v is at most HETERO_VALUE_MAX bytes, the tag HETERO_TAG_MAX */
		n = tag ? (size_t)(tag - 1 - v) : (size_t)(p - v);
		memcpy(out->name, v, n);
		out->name[n] = '\0';
		n = tag ? (size_t)(p - tag) : 0;
		memcpy(out->tag, tag ? tag : "", n);
		out->tag[n] = '\0';
	}
	return 0;
bad:
	fail(err, errlen, "--image=", v, &b, IMAGE_FORMS);
	return -1;
}

int hetero_check_image(const char *v, char *err, size_t errlen)
{
	return hetero_parse_image(v, NULL, err, errlen);
}

int hetero_parse_checkpoint(const char *v, char out[HETERO_VALUE_MAX + 1],
			    char *err, size_t errlen)
{
	struct bad b = { NULL, NULL };
	const char *p;

	if ((b.why = common(v)))
		goto bad;
	if (*v != '/') {
		oops(&b, "DIR must be an absolute path", v);
		goto bad;
	}
	for (p = v; *p; p++) {
		unsigned char c = (unsigned char)*p;

		if (c <= 0x20 || c >= 0x7f) {
			oops(&b, "whitespace or not printable ASCII", p);
			goto bad;
		}
		/* A ".." component: "/.." followed by '/' or the end. */
		if (c == '/' && p[1] == '.' && p[2] == '.' && (p[3] == '/' || !p[3])) {
			oops(&b, "'..' components are not allowed", p + 1);
			goto bad;
		}
	}
	if (out) /* v is at most HETERO_VALUE_MAX bytes (common) */
		memcpy(out, v, (size_t)(p - v) + 1);
	return 0;
bad:
	fail(err, errlen, "--checkpoint=", v, &b, CHECKPOINT_FORMS);
	return -1;
}

int hetero_check_checkpoint(const char *v, char *err, size_t errlen)
{
	return hetero_parse_checkpoint(v, NULL, err, errlen);
}

int hetero_check_migratable(const char *v, char *err, size_t errlen)
{
	struct bad b = { "a flag takes no value", NULL };

	if (!v || !*v || !strcmp(v, HETERO_FLAG_NULL))
		return 0;
	fail(err, errlen, "--migratable=", v, &b, MIGRATABLE_FORMS);
	return -1;
}

void hetero_conf_init(struct hetero_conf *c)
{
	memset(c, 0, sizeof(*c));
}

/* "a,b,c" into l; names are checked like option values. */
static int parse_list(const char *s, struct hetero_list *l, struct bad *b)
{
	char low[HETERO_POLICY_MAX + 1];
	const char *p = s;

	for (;;) {
		const char *q = scan_name(p, low, b);

		if (!q)
			return -1;
		if (*q && *q != ',') {
			oops(b, "unexpected character", q);
			return -1;
		}
		if (in_list(l, low)) {
			oops(b, "a name is listed twice", p);
			return -1;
		}
		if (l->n == HETERO_LIST_MAX) {
			oops(b, "more than " STR(HETERO_LIST_MAX) " names", p);
			return -1;
		}
		memcpy(l->name[l->n++], low, sizeof(low));
		if (!*q)
			return 0;
		p = q + 1;
	}
}

int hetero_conf_parse(struct hetero_conf *c, int argc, char *const argv[],
		      char *err, size_t errlen)
{
	struct bad b = { NULL, NULL };
	const char *arg = NULL;
	struct hetero_list *l;
	size_t k;
	int i;

	hetero_conf_init(c);
	if (argc < 0 || (argc > 0 && !argv)) {
		if (err && errlen)
			snprintf(err, errlen, "plugstack.conf arguments are missing");
		return -1;
	}
	for (i = 0; i < argc; i++) {
		arg = argv[i];
		if (!arg || !*arg) {
			b.why = "empty argument";
			goto bad;
		}
		if ((k = prefix_ci(arg, "energy=")))
			l = &c->energy;
		else if ((k = prefix_ci(arg, "tiers=")))
			l = &c->tiers;
		else {
			b.why = strchr(arg, '=') ? "unknown key; known keys are energy and tiers"
						 : "not key=value";
			goto bad;
		}
		if (l->n) {
			b.why = "key given twice";
			goto bad;
		}
		if (parse_list(arg + k, l, &b))
			goto bad;
	}
	return 0;
bad:
	fail(err, errlen, "plugstack.conf argument ", arg, &b, CONF_FORMS);
	hetero_conf_init(c);
	return -1;
}
