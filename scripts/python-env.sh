#!/usr/bin/env bash
# Prints the path of a Python virtual environment that holds exactly the
# packages of a lock file, creating it on first use.
#
# Usage: scripts/python-env.sh [LOCK]
#   LOCK  the lock file (default: oracle/requirements.lock, the oracle's torch
#         stack); e.g. trace/hta/requirements.lock for the HolisticTraceAnalysis
#         cross-check. A relative path is from the current directory.
#
# The environment lives outside the clone, keyed by the lock file's sha256:
#   ${CANIFINETUNE_PY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/canifinetune}/venv-<hash12>
# so repeated runs (and other clones) reuse it, and editing the lock file makes
# a new one. Installation is `pip install --no-deps -r oracle/requirements.lock`
# followed by `pip check`; a marker file is written only after both succeed, so
# an interrupted install is redone, never reused.
#
# Environment:
#   CANIFINETUNE_PY_CACHE  where keyed environments live (CI points it at a
#                          persistent cache so the ~5.6 GB torch install is reused)
#   CANIFINETUNE_VENV      use this existing environment instead, after checking
#                          that `pip freeze` there matches the lock file exactly
#                          (only for the default lock: an environment for
#                          another lock is always the keyed one)
#   PYTHON                 the interpreter to create environments with (python3)
#
# Exit status: 0 with the path on stdout; 1 with the reason on stderr.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
default_lock="$root/oracle/requirements.lock"
case "${1:-}" in
"") lock="$default_lock" ;;
/*) lock="$1" ;;
*) lock="$PWD/$1" ;;
esac
[ $# -le 1 ] || { echo "python-env: usage: scripts/python-env.sh [LOCK]" >&2; exit 1; }
[ -f "$lock" ] || { echo "python-env: $lock: no such file" >&2; exit 1; }

# The lock's package lines, normalised (lower case, - for _), sorted.
pins() { grep -v '^\s*\(#\|$\)' "$1" | tr 'A-Z_' 'a-z-' | sort; }

matches_lock() { # $1: venv dir
	local got
	got=$("$1/bin/python" -m pip freeze --all 2>/dev/null | grep -v '^\(pip\|wheel\)==' | tr 'A-Z_' 'a-z-' | sort) || return 1
	diff <(pins "$lock") <(printf '%s\n' "$got") >&2
}

if [ -n "${CANIFINETUNE_VENV:-}" ] && [ "$lock" = "$default_lock" ]; then
	if [ ! -x "$CANIFINETUNE_VENV/bin/python" ]; then
		echo "python-env: CANIFINETUNE_VENV=$CANIFINETUNE_VENV has no bin/python" >&2; exit 1
	fi
	if ! matches_lock "$CANIFINETUNE_VENV"; then
		echo "python-env: CANIFINETUNE_VENV=$CANIFINETUNE_VENV differs from $lock (diff above: < lock, > installed)" >&2; exit 1
	fi
	echo "$CANIFINETUNE_VENV"
	exit 0
fi

hash=$(sha256sum "$lock" | cut -c1-12)
cache="${CANIFINETUNE_PY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/canifinetune}"
venv="$cache/venv-$hash"
mkdir -p "$cache"

# One installer at a time per environment; others wait for it.
exec 9>"$venv.lock"
flock 9

if [ ! -f "$venv/.complete" ]; then
	py="${PYTHON:-python3}"
	command -v "$py" >/dev/null || { echo "python-env: $py not found" >&2; exit 1; }
	rm -rf "$venv"
	echo "python-env: creating $venv from $lock (several minutes; torch is large)" >&2
	"$py" -m venv "$venv"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$lock" >&2
	"$venv/bin/python" -m pip check >&2
	matches_lock "$venv" || { echo "python-env: $venv does not match $lock after install" >&2; exit 1; }
	sha256sum "$lock" >"$venv/.complete"
fi
echo "$venv"
