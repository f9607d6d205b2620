/* maize-bench: one installed command with subcommands (issue 6).
 *
 *   maize-bench taskbench [Task Bench flags] [--devices S] [--policy P]
 *   maize-bench metg      [sweep options]
 *   maize-bench pipeline  [options]   (the README's main job)
 *   maize-bench trace     FILE.json [--svg OUT.svg]
 *
 * Each subcommand is one file with one entry point below; main.c only
 * dispatches.  Entry points get argv with argv[0] = the subcommand name
 * and return a process exit status (0 success, 1 failure, 2 usage). */
#ifndef MZB_H
#define MZB_H

int mzb_taskbench_main(int argc, char **argv); /* taskbench.c */
int mzb_metg_main(int argc, char **argv);      /* metg.c */
int mzb_pipeline_main(int argc, char **argv);  /* pipeline.c */
int mzb_trace_main(int argc, char **argv);     /* trace.c */

#endif
