/*
 * spank_hetero.c - Slurm glue of the hetero SPANK plugin.
 *
 * Adds --accel, --arch, --energy, --tier, --image, --checkpoint and
 * --migratable to sbatch, srun and salloc and checks their SYNTAX only.
 * Slurm itself carries each value to the job as
 * _SLURM_SPANK_OPTION_hetero_<option>, where job_submit.lua (the bridge)
 * reads it and does the semantic checks. In slurmstepd (remote) the plugin
 * does one thing more: a job with --checkpoint=DIR finds DIR in
 * SLURM_HETERO_CHECKPOINT.
 *
 * plugstack.conf: required /path/hetero.so [energy=a,b,...] [tiers=x,y,...]
 */
#include <stdio.h>
#include <string.h>

#include <slurm/spank.h>

#include "hetero_opts.h"

SPANK_PLUGIN(hetero, 1) /* the macro brings its own ';' */

enum opt_id {
	OPT_ACCEL, OPT_ARCH, OPT_ENERGY, OPT_TIER, OPT_IMAGE, OPT_CHECKPOINT,
	OPT_MIGRATABLE,
};

#define CHECKPOINT_ENV "SLURM_HETERO_CHECKPOINT"

/* Filled by slurm_spank_init, read by the option callbacks (which get no
 * spank handle); a plugin instance lives in one process, one thread. */
static struct hetero_conf conf;
/* Seen in the client, for the one rule that spans two options. */
static int seen_checkpoint, seen_migratable;

static int opt_cb(int val, const char *optarg, int remote);

/* Registered at run time: on 22.05 a static spank_options[] table reaches
 * srun only, never sbatch/salloc. */
static struct spank_option opts[] = {
	{ "accel", "SPEC",
	  "[hetero] accelerators: MODEL[:N], VENDOR|STACK[:N], any[:N] or "
	  "units=U, optionally ,mem>=SIZE (e.g. a100-80gb:4, nvidia:2,mem>=80G)",
	  1, OPT_ACCEL, opt_cb },
	{ "arch", "ARCH", "[hetero] CPU architecture: any, x86_64 or aarch64",
	  1, OPT_ARCH, opt_cb },
	{ "energy", "POLICY", "[hetero] energy policy (e.g. balanced)",
	  1, OPT_ENERGY, opt_cb },
	{ "tier", "TIER", "[hetero] service tier (QoS)", 1, OPT_TIER, opt_cb },
	{ "image", "IMAGE",
	  "[hetero] container image NAME[:TAG] (e.g. nvidia/pytorch:24.05-py3)",
	  1, OPT_IMAGE, opt_cb },
	{ "checkpoint", "DIR",
	  "[hetero] checkpoint folder (absolute path): the job is requeued "
	  "when preempted or failed and finds DIR in $" CHECKPOINT_ENV,
	  1, OPT_CHECKPOINT, opt_cb },
	{ "migratable", NULL,
	  "[hetero] the job may resume elsewhere from its checkpoint "
	  "(needs --checkpoint)",
	  0, OPT_MIGRATABLE, opt_cb },
};
/* opts[] is in enum opt_id order. */
#define CHECKPOINT_OPT (&opts[OPT_CHECKPOINT])

static int opt_cb(int val, const char *optarg, int remote)
{
	/* In slurmstepd (remote) the job was accepted already: recheck the
	 * syntax but not the site lists, which may have changed meanwhile. */
	const struct hetero_list *energy = remote ? NULL : &conf.energy;
	const struct hetero_list *tiers = remote ? NULL : &conf.tiers;
	char err[HETERO_ERR_MAX];
	int rc = -1;

	switch (val) {
	case OPT_ACCEL:
		rc = hetero_check_accel(optarg, err, sizeof(err));
		break;
	case OPT_ARCH:
		rc = hetero_check_arch(optarg, err, sizeof(err));
		break;
	case OPT_ENERGY:
		rc = hetero_check_energy(optarg, energy, err, sizeof(err));
		break;
	case OPT_TIER:
		rc = hetero_check_tier(optarg, tiers, err, sizeof(err));
		break;
	case OPT_IMAGE:
		rc = hetero_check_image(optarg, err, sizeof(err));
		break;
	case OPT_CHECKPOINT:
		rc = hetero_check_checkpoint(optarg, err, sizeof(err));
		seen_checkpoint |= !rc && !remote;
		break;
	case OPT_MIGRATABLE: /* a flag: optarg is NULL here, "" from the env */
		rc = hetero_check_migratable(optarg, err, sizeof(err));
		seen_migratable |= !rc && !remote;
		break;
	default:
		snprintf(err, sizeof(err), "unknown option id %d", val);
	}
	if (rc)
		slurm_error("hetero: %s", err);
	return rc ? -1 : 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[HETERO_ERR_MAX];
	size_t i;
	int rc = -1;

	/* Arguments are checked in every context so that a typo in
	 * plugstack.conf shows up on the first command, not only in sbatch. */
	if (hetero_conf_parse(&conf, ac, av, err, sizeof(err))) {
		slurm_error("hetero: %s", err);
		goto out;
	}
	switch (spank_context()) {
	case S_CTX_LOCAL:     /* srun */
	case S_CTX_ALLOCATOR: /* sbatch, salloc */
	case S_CTX_REMOTE:    /* slurmstepd: values come back from the env */
		for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
			spank_err_t e = spank_option_register(sp, &opts[i]);

			if (e != ESPANK_SUCCESS) {
				slurm_error("hetero: cannot register --%s: %s",
					    opts[i].name, spank_strerror(e));
				goto out;
			}
		}
		break;
	default: /* slurmd, prolog/epilog: no options there */
		break;
	}
	rc = 0;
out:
	if (rc)
		hetero_conf_init(&conf);
	return rc;
}

/* sbatch, srun, salloc: after every option (command line, script, env). */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	if (seen_migratable && !seen_checkpoint) {
		slurm_error("hetero: --migratable needs --checkpoint=DIR: give both "
			    "options");
		return -1;
	}
	return 0;
}

/* slurmstepd, every step (the batch step too), before its tasks start: they
 * inherit the job's environment set here. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	char *dir = NULL;
	spank_err_t e;

	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	/* ESPANK_ERROR: the option was not used, nothing to do. */
	if (spank_option_getopt(sp, CHECKPOINT_OPT, &dir) != ESPANK_SUCCESS || !dir)
		return 0;
	if (hetero_check_checkpoint(dir, NULL, 0))
		return 0; /* the bridge refuses such jobs: never export it */
	e = spank_setenv(sp, CHECKPOINT_ENV, dir, 1);
	if (e != ESPANK_SUCCESS) {
		slurm_error("hetero: cannot set %s: %s", CHECKPOINT_ENV,
			    spank_strerror(e));
		return -1;
	}
	return 0;
}
