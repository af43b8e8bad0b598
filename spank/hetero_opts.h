/*
 * hetero_opts.h - syntax checks for the hetero SPANK plugin's options.
 *
 * Pure C, no Slurm headers: the unit tests and the fuzzer link this alone.
 * Every checker returns 0 when the value is acceptable and -1 otherwise; on
 * -1 it writes one printable-ASCII line into err (if err && errlen) that
 * names the option, shows the (escaped) value and lists the accepted forms.
 * Semantics (does the model exist?) are the job_submit bridge's business.
 *
 * The grammar is also enforced by the bridge itself (slurm_hetero/bridge/bridge.lua),
 * since a user can bypass the plugin; tests/data/grammar/options.cases holds the
 * cases both sides must agree on (accept/reject and the parsed meaning), and every
 * limit below has its twin there.
 */
#ifndef HETERO_OPTS_H
#define HETERO_OPTS_H

#include <stddef.h>
#include <stdint.h>

#define HETERO_VALUE_MAX      256   /* longest option value, bytes */
#define HETERO_ACCEL_NAME_MAX 64    /* model/vendor/stack name */
#define HETERO_COUNT_MAX      1024  /* NAME:N, any:N */
#define HETERO_UNITS_MAX      100000
#define HETERO_UNITS_DECIMALS 3     /* units=2.125 at most */
#define HETERO_MEM_MAX_MIB    (UINT64_C(1) << 40) /* 1 EiB: overflow guard */
#define HETERO_POLICY_MAX     32    /* energy policy / tier name */
#define HETERO_LIST_MAX       32    /* names in a plugstack list */
#define HETERO_TAG_MAX        128   /* image tag */
#define HETERO_SHOW_MAX       64    /* chars of a bad value echoed back */
#define HETERO_ERR_MAX        2048  /* enough for any message below */
/* What Slurm puts in the job's environment for a flag option (has_arg = 0): sbatch's own
 * environment gets "", the SPANK job environment "(null)" (xstrcat of a NULL optarg). */
#define HETERO_FLAG_NULL      "(null)"

enum hetero_accel_kind {
	HETERO_ACCEL_NAME,   /* a100-80gb:4, nvidia:2, cann:8 */
	HETERO_ACCEL_ANY,    /* any[:N] */
	HETERO_ACCEL_UNITS,  /* units=U */
};

struct hetero_accel {
	enum hetero_accel_kind kind;
	char name[HETERO_ACCEL_NAME_MAX + 1]; /* lower-cased; "" unless NAME */
	unsigned count;       /* 1 when ":N" is absent; 0 for units= */
	uint32_t units_milli; /* units=2.5 -> 2500; 0 unless UNITS */
	uint64_t mem_mib;     /* mem>=SIZE rounded up to MiB; 0 = not given */
};

enum hetero_arch {
	HETERO_ARCH_ANY,
	HETERO_ARCH_X86_64,
	HETERO_ARCH_AARCH64, /* also arm64, armv8 */
};

/* NAME[:TAG] of --image: NAME as given (case matters), TAG "" when absent. */
struct hetero_image {
	char name[HETERO_VALUE_MAX + 1];
	char tag[HETERO_TAG_MAX + 1];
};

/* Allowed names from plugstack.conf; n == 0 means "any well-formed name". */
struct hetero_list {
	unsigned n;
	char name[HETERO_LIST_MAX][HETERO_POLICY_MAX + 1]; /* lower-cased */
};

struct hetero_conf {
	struct hetero_list energy; /* energy=a,b,c */
	struct hetero_list tiers;  /* tiers=x,y,z */
};

void hetero_conf_init(struct hetero_conf *c);
/* Parses plugstack.conf arguments; on error c is left empty (no lists). */
int hetero_conf_parse(struct hetero_conf *c, int argc, char *const argv[],
		      char *err, size_t errlen);

/* out may be NULL; it is written only on success. */
int hetero_parse_accel(const char *v, struct hetero_accel *out,
		       char *err, size_t errlen);
int hetero_parse_arch(const char *v, enum hetero_arch *out,
		      char *err, size_t errlen);
const char *hetero_arch_name(enum hetero_arch a);

/* The lower-cased policy / tier name into out (may be NULL). */
int hetero_parse_energy(const char *v, const struct hetero_list *allowed,
			char out[HETERO_POLICY_MAX + 1], char *err, size_t errlen);
int hetero_parse_tier(const char *v, const struct hetero_list *allowed,
		      char out[HETERO_POLICY_MAX + 1], char *err, size_t errlen);
int hetero_parse_image(const char *v, struct hetero_image *out,
		       char *err, size_t errlen);
/* --checkpoint=DIR: an absolute path of printable ASCII without whitespace and
 * without ".." components, at most HETERO_VALUE_MAX bytes; copied into out. */
int hetero_parse_checkpoint(const char *v, char out[HETERO_VALUE_MAX + 1],
			    char *err, size_t errlen);
/* --migratable is a flag: NULL (the client's optarg), "" or HETERO_FLAG_NULL (its
 * environment entries) are accepted, any value is refused. */
int hetero_check_migratable(const char *v, char *err, size_t errlen);

int hetero_check_accel(const char *v, char *err, size_t errlen);
int hetero_check_arch(const char *v, char *err, size_t errlen);
/* allowed may be NULL or empty: then only the syntax is checked. */
int hetero_check_energy(const char *v, const struct hetero_list *allowed,
			char *err, size_t errlen);
int hetero_check_tier(const char *v, const struct hetero_list *allowed,
		      char *err, size_t errlen);
int hetero_check_image(const char *v, char *err, size_t errlen);
int hetero_check_checkpoint(const char *v, char *err, size_t errlen);

#endif /* HETERO_OPTS_H */
