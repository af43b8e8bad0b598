#!/bin/sh
# Fuzz every option checker and the plugstack parser for SECONDS (default
# 600). Seeds: fuzz/corpus and every value of the grammar case file shared
# with the job_submit bridge (tests/data/grammar/options.cases, written to
# build/fuzz-seeds by `make fuzz-seeds`). New inputs go to build/fuzz-corpus
# (the seeds stay as they are); crashes land in build/fuzz-artifacts/.
# Usage: spank/fuzz/run.sh [SECONDS]
set -eu
secs=${1:-600}
case $secs in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
spank=$(dirname "$here")
make -s --no-print-directory -C "$spank" fuzz fuzz-seeds
mkdir -p "$spank/build/fuzz-corpus" "$spank/build/fuzz-artifacts"
exec "$spank/build/fuzz_opts" -max_total_time="$secs" -max_len=2048 \
	-dict="$here/opts.dict" -print_final_stats=1 \
	-artifact_prefix="$spank/build/fuzz-artifacts/" \
	"$spank/build/fuzz-corpus" "$here/corpus" "$spank/build/fuzz-seeds"
