#!/usr/bin/env bash
# Install what maize needs on Debian 12, as root (or through sudo):
#   scripts/setup-debian.sh          the library and its main job:
#                                    scripts/debian-packages.txt
#   scripts/setup-debian.sh --test   also the tests, CI and benchmark peers:
#                                    scripts/debian-packages-test.txt
# Safe to run again.  apt waits (up to 10 minutes) for another apt or dpkg
# to let go of its lock instead of failing at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lists=("$here/debian-packages.txt")
case "${1:-}" in
  "") ;;
  --test) lists+=("$here/debian-packages-test.txt") ;;
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup-debian.sh: unknown option '$1' (--test, --help)" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup-debian.sh: run it as root (no sudo here)" >&2; exit 1; }
  exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=600)
apt-get "${apt_opts[@]}" update -qq
# shellcheck disable=SC2046 # one word per package
apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends $(grep -hv '^#' "${lists[@]}") >/dev/null
echo "maize: dependencies installed (${lists[*]##*/})"
