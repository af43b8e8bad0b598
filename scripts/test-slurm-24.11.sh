#!/bin/bash
# Runs the integration suite against Slurm 24.11 (Debian 13's packages) on a Debian 12
# machine: the dev cluster's daemons (munged, MariaDB, slurmdbd, slurmctld, slurmd) and
# pytest all run inside a debootstrapped Debian 13 (trixie) root, so every Slurm command
# the project runs is 24.11's.
#
# Usage, as root:
#   scripts/test-slurm-24.11.sh [--root DIR] [--setup-only] [--] [PYTEST ARGS...]
#   make test-24.11 ARGS='-k bridge'
# --root DIR     the trixie root (default $SLURM_HETERO_TRIXIE or /opt/slurm-hetero-trixie);
#                built on first use, reused (and only topped up) after that.
# --setup-only   build/refresh the root, the venv and the SPANK plugin, run no tests.
# --mariadb=host (default) the dev cluster's MariaDB is the host's (Debian 12: 10.11), run
#                from inside the root; --mariadb=root: trixie's own (11.8), with which
#                slurmdbd 24.11.5 stops at start (`select @var := concat('')` fails with
#                "Number of columns in result (=1) set exceeds ... (=0)", checked 2026-12-02).
# PYTEST ARGS    passed to pytest; without a tests/... path, tests/integration is run.
#                e.g. `-- tests/integration/test_bridge.py -x`, `-- -k "cluster and not ansible"`.
#
# Inside the root: the project is bind-mounted read-only at /src (nothing in the checkout
# is written: pytest's cache is off, bytecode not written, temp files under /var/tmp), the
# venv is /opt/hetero-venv (dependencies from pyproject.toml; the package itself is the
# mounted /src, through a .pth file and generated console scripts, as an editable
# install would be), the SPANK plugin is built against 24.11's <slurm/spank.h> into
# /opt/hetero-spank. /proc, /dev and /sys are bound from the host; everything mounted and
# every process left running in the root is undone on every exit path (trap).
# A chroot cannot create user namespaces: the one test of rootless runc skips here.
# Environment: SLURM_HETERO_TRIXIE_MIRROR (default: the host's Debian mirror).
set -euo pipefail
# The whole script is one block: bash reads it before running any of it, so editing the file
# while a run is under way cannot change what that run does.
{
ROOT=${SLURM_HETERO_TRIXIE:-/opt/slurm-hetero-trixie}
SETUP_ONLY=0
MARIADB=host
PROJECT=$(cd "$(dirname "$0")/.." && pwd -P)
die() { echo "test-slurm-24.11: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        --root) [ $# -ge 2 ] || die "--root needs a directory"; ROOT=$2; shift 2 ;;
        --root=*) ROOT=${1#--root=}; shift ;;
        --setup-only) SETUP_ONLY=1; shift ;;
        --mariadb=host|--mariadb=root) MARIADB=${1#--mariadb=}; shift ;;
        --mariadb*) die "$1: allowed are --mariadb=host and --mariadb=root" ;;
        -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
        --) shift; break ;;
        *) break ;;
    esac
done

[ "$(id -u)" = 0 ] || die "run as root (it builds a chroot and mounts into it)"
case $ROOT in
    /*) ;;
    *) die "--root $ROOT: give an absolute path" ;;
esac
ROOT=$(realpath -m -- "$ROOT")
case $ROOT in
    /|/bin|/boot|/dev|/etc|/home|/lib|/lib64|/opt|/proc|/root|/run|/sbin|/srv|/sys|/tmp|/usr|/usr/*|/var|/work)
        die "--root $ROOT: refusing a system folder (give a folder of its own, e.g. /opt/slurm-hetero-trixie)" ;;
esac
[[ $ROOT =~ ^/[A-Za-z0-9._/+-]+$ ]] || die "--root $ROOT: allowed characters are letters, digits and . _ / + -"
[ -r "$PROJECT/pyproject.toml" ] || die "$PROJECT is not the slurm-hetero checkout"

MIRROR=${SLURM_HETERO_TRIXIE_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' \
    /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
VENV=/opt/hetero-venv
SPANK_BUILD=/opt/hetero-spank
BASETEMP=/var/tmp/hetero-pytest
# What the dev cluster and the integration tests run (see the Makefile's DEB_PKGS).
PKGS="slurmctld slurmd slurmdbd slurm-client munge mariadb-server mariadb-client libslurm-dev
      python3 python3-venv python3-dev lua5.1 gcc make libc6-dev runc busybox-static faketime
      libfaketime util-linux procps iproute2 ca-certificates prometheus openssh-client"

# A chroot command with a clean environment (the host's PIP_*, VIRTUAL_ENV... stay out).
in_root() {
    chroot "$ROOT" /usr/bin/env -i PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" DEBIAN_FRONTEND=noninteractive "$@"
}

# Mount points under a folder, deepest first.
mounts_under() {
    awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r
}

# Processes whose root is the chroot: only what this script (or a run before it) started there.
stop_root_processes() {
    local pid left=()
    for pid in /proc/[0-9]*; do
        case $(readlink "$pid/root" 2>/dev/null) in
            "$ROOT"|"$ROOT"/*) left+=("${pid#/proc/}") ;;
        esac
    done
    [ ${#left[@]} -gt 0 ] || return 0
    echo "test-slurm-24.11: stopping ${#left[@]} processes left in $ROOT" >&2
    kill -TERM "${left[@]}" 2>/dev/null || true
    sleep 2
    for pid in "${left[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

unmount_all() {
    local m
    for m in $(mounts_under "$1"); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "cannot unmount $m" >&2
    done
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    [ -d "$ROOT" ] && stop_root_processes
    unmount_all "$ROOT"
    [ -d "$ROOT.partial" ] && unmount_all "$ROOT.partial"
    exit "$rc"
}

# One run per root at a time: two would share its mounts and its basetemp. The clean-up is
# armed only once the lock is held (a refused run leaves the other one's mounts alone).
mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock -n 9 || die "another run is using $ROOT (lock $ROOT.lock)"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# ---- the root ---------------------------------------------------------------------------
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
    command -v debootstrap >/dev/null || {
        echo "installing debootstrap"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    unmount_all "$ROOT.partial"
    [ -z "$(mounts_under "$ROOT.partial")" ] || die "$ROOT.partial still has mounts: not removing it"
    rm -rf --one-file-system "$ROOT.partial"
    echo "debootstrap trixie into $ROOT (mirror $MIRROR)"
    debootstrap --variant=minbase trixie "$ROOT.partial" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 \
        || die "debootstrap failed: see $ROOT.debootstrap.log"
    [ ! -e "$ROOT" ] || rmdir "$ROOT" 2>/dev/null || die "$ROOT exists and is not an empty folder"
    mv "$ROOT.partial" "$ROOT"
fi

mkdir -p "$ROOT/src" "$ROOT/proc" "$ROOT/dev" "$ROOT/sys"
[ -z "$(mounts_under "$ROOT")" ] || { echo "earlier mounts in $ROOT: undoing them"; stop_root_processes; unmount_all "$ROOT"; }
# The root a mount point of its own: runc makes / private (MS_REC|MS_PRIVATE) and pivots
# its root, both refused (EINVAL) where / is a folder that chroot chose.
mount --bind "$ROOT" "$ROOT"
mount --bind /proc "$ROOT/proc"
mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"
mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"
mount --bind "$PROJECT" "$ROOT/src" && mount -o remount,bind,ro "$ROOT/src"
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
[ -s "$ROOT/etc/hosts" ] || printf '127.0.0.1 localhost\n::1 localhost\n' >"$ROOT/etc/hosts"
grep -q "$(hostname)" "$ROOT/etc/hosts" || printf '127.0.1.1 %s\n' "$(hostname)" >>"$ROOT/etc/hosts"
# The host's MariaDB, run from inside the root: the host's / read-only at /opt/host (its own
# mounts not included), writable only where the dev cluster's data lies (the root's /var/tmp,
# seen from the host under $ROOT) and /tmp. Wrappers named like trixie's programs chroot
# there and prefix absolute --opt=/path values with $ROOT, so both sides name the same files.
H=$ROOT/opt/host
rm -f "$ROOT/usr/local/sbin/mariadbd" "$ROOT/usr/local/sbin/mysql_install_db"
if [ "$MARIADB" = host ]; then
    command -v mariadbd >/dev/null && command -v mysql_install_db >/dev/null \
        || die "--mariadb=host: the host has no MariaDB (apt-get install mariadb-server, or --mariadb=root)"
    mkdir -p "$H" "$ROOT/var/tmp" "$ROOT/tmp"
    mount --bind / "$H" && mount -o remount,bind,ro "$H"
    mount --bind /proc "$H/proc"
    mount --rbind /dev "$H/dev" && mount --make-rslave "$H/dev"
    mount --bind "$ROOT/tmp" "$H/tmp"
    mount --bind "$ROOT/var/tmp" "$H$ROOT/var/tmp"
    for prog in mariadbd mysql_install_db; do
        cat >"$ROOT/usr/local/sbin/$prog" <<WRAP
#!/bin/sh
# Written by scripts/test-slurm-24.11.sh: the host's $prog (MariaDB $(mariadbd --version | awk '{print $3}')).
for a; do
    case \$a in --*=/*) a="\${a%%=*}=$ROOT\${a#*=}" ;; esac
    set -- "\$@" "\$a"; shift
done
exec chroot /opt/host $(command -v $prog) "\$@"
WRAP
        chmod 755 "$ROOT/usr/local/sbin/$prog"
    done
fi
# No daemon starts from a package's postinst inside the root.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d" && chmod 755 "$ROOT/usr/sbin/policy-rc.d"

# Packages: installed once (the stamp lists those installed); a run wanting more adds them.
# chromium only for the tests that open a page in it (all of them, or those files named).
browser=
case " $* " in
    *test_jobpage*|*test_report_cluster*) browser=chromium ;;
    *" tests/"*) ;;
    *) browser=chromium ;;
esac
want=$(echo $PKGS $browser | tr ' ' '\n' | sed '/^$/d' | sort -u)
stamp=$ROOT/var/lib/hetero-packages
if [ -n "$(comm -23 <(echo "$want") <(sort -u "$stamp" 2>/dev/null))" ]; then
    want=$(sort -u <(echo "$want") "$stamp" 2>/dev/null || echo "$want")
    echo "installing in the root: $(echo $want)"
    printf 'deb %s trixie main\n' "$MIRROR" >"$ROOT/etc/apt/sources.list"
    in_root apt-get update -qq
    # shellcheck disable=SC2086
    in_root apt-get install -y -qq --no-install-recommends $want >"$ROOT.apt.log" 2>&1 \
        || die "apt-get install in the root failed: see $ROOT.apt.log"
    echo "$want" >"$stamp"
fi
echo "Slurm in the root: $(in_root slurmctld -V)"

# ---- venv: dependencies from pyproject.toml, the package from /src -----------------------
deps=$(in_root python3 -c '
import tomllib
p = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]
print("\n".join(sorted(p["dependencies"] + p["optional-dependencies"]["dev"])))')
# The host's CA bundle: this machine may reach the registry through a proxy of its own
# (pip here, and the tests that build a wheel).
cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/hetero-host-ca.crt"
vstamp=$ROOT$VENV/.hetero-deps
if [ "$(cat "$vstamp" 2>/dev/null)" != "$deps" ]; then
    echo "venv $VENV: installing $(echo "$deps" | wc -l) requirements"
    [ -x "$ROOT$VENV/bin/pip" ] || in_root python3 -m venv "$VENV"
    mapfile -t reqs <<<"$deps"
    in_root PIP_CERT=/etc/hetero-host-ca.crt "$VENV/bin/pip" install -q --disable-pip-version-check "${reqs[@]}" \
        || die "pip install in the root's venv failed"
    echo "$deps" >"$vstamp"
fi
# The package: /src on the path and its console scripts, rewritten every run (pyproject may
# have changed); nothing is written into the checkout.
in_root "$VENV/bin/python" - <<'PY'
import sysconfig, tomllib
from pathlib import Path

site = Path(sysconfig.get_paths()["purelib"])
(site / "slurm_hetero_src.pth").write_text("/src\n")
bindir = Path(sysconfig.get_paths()["scripts"])
for name, target in tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["scripts"].items():
    module, func = target.split(":")
    path = bindir / name
    path.write_text(f"#!{bindir}/python\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    path.chmod(0o755)
PY

# ---- the SPANK plugin against 24.11's headers -------------------------------------------
in_root make -s -C /src/spank BUILD=$SPANK_BUILD "$SPANK_BUILD/hetero.so"
[ "$SETUP_ONLY" = 1 ] && { echo "root ready: $ROOT"; exit 0; }

# ---- the tests --------------------------------------------------------------------------
paths=()
for a in "$@"; do case $a in tests/*|./tests/*) paths=(x) ;; esac; done
[ ${#paths[@]} -gt 0 ] || set -- tests/integration "$@"
mkdir -p "$ROOT$BASETEMP"
echo "pytest (Slurm 24.11, in $ROOT): $*"
set +e
chroot "$ROOT" /usr/bin/env -i PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" PYTHONDONTWRITEBYTECODE=1 PIP_CERT=/etc/hetero-host-ca.crt \
    SLURM_HETERO_SPANK=$SPANK_BUILD/hetero.so \
    /bin/sh -c 'cd /src && exec "$0" "$@"' "$VENV/bin/pytest" -p no:cacheprovider \
    --basetemp="$BASETEMP/run" "$@"
rc=$?
set -e
exit "$rc"
}
