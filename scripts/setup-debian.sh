#!/usr/bin/env bash
# Install what maize needs to build, test and benchmark on Debian 12: the
# packages listed in scripts/debian-packages.txt.  Run as root (or it asks
# sudo).  Safe to run again.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
# Wait (up to 10 minutes) for another apt or dpkg to let go of the lock
# instead of failing at once.
apt_opts=(-o DPkg::Lock::Timeout=600)
apt-get "${apt_opts[@]}" update -qq
apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends $(grep -v '^#' "$(dirname "$0")/debian-packages.txt") >/dev/null
echo "maize: dependencies installed"
