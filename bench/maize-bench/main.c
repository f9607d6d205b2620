/* maize-bench: dispatch to a subcommand (see mzb.h). */
#include <stdio.h>
#include <string.h>

#include "maize/version.h"
#include "mzb.h"

static const struct {
  const char *name;
  int (*main)(int, char **);
  const char *help;
} cmds[] = {
    {"taskbench", mzb_taskbench_main, "run one Task Bench pattern (Task Bench's flags) on maize"},
    {"metg", mzb_metg_main, "sweep task granularity, METG(50%) for maize, OpenMP and StarPU, SVG plot"},
    {"pipeline", mzb_pipeline_main, "multi-device pipeline under every policy: table, trace, Gantt SVG"},
    {"trace", mzb_trace_main, "turn an MZ_TRACE file into a Gantt SVG and a text summary"},
    {"sim-net", mzb_simnet_main, "Task Bench stencil_1d on 16..1024 simulated nodes: METG on the virtual clock"},
#if MZB_HAVE_MPI
    {"mpi-metg", mzb_mpi_metg_main, "under mpirun: METG(50%) of maize over MPI and a plain MPI peer"},
    {"mpi-weak", mzb_mpi_weak_main, "under mpirun: weak scaling of a compute-bound stencil over MPI"},
#endif
};

static void usage(FILE *f) {
  fprintf(f, "usage: maize-bench <command> [options]   (maize-bench <command> --help)\n       maize-bench --version\n\ncommands:\n");
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].help);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
    printf("maize-bench %s\n", mz_version());
    return 0;
  }
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (!strcmp(argv[1], cmds[i].name)) return cmds[i].main(argc - 1, argv + 1);
  fprintf(stderr, "maize-bench: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
