#!/bin/sh
# mpirun with a session directory of its own: Open MPI 4 creates its
# session directory under /tmp (/tmp/ompi.<host>.<uid>) by a check and a
# mkdir, so two mpirun started at the same moment (meson runs two tests at
# once) can both see it missing, and the second then fails at start-up
# ("A call to mkdir was unable to create the desired directory ... File
# exists").  Each run here gets a fresh base directory, removed after it.
set -u
real=$(command -v mpirun) || { echo "mpirun-own-tmpdir.sh: mpirun not found" >&2; exit 127; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/mz-ompi.XXXXXX") || exit 1
OMPI_MCA_orte_tmpdir_base=$dir "$real" "$@"
rc=$?
rm -rf "$dir"
exit $rc
