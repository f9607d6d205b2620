#!/usr/bin/env bash
# Install what maize needs to build, test and benchmark on Debian 12: the
# packages listed in scripts/debian-packages.txt.  Run as root (or it asks
# sudo).  Safe to run again.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $(grep -v '^#' "$(dirname "$0")/debian-packages.txt") >/dev/null
echo "maize: dependencies installed"
