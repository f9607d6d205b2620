/* maize-bench: one installed command with subcommands.
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

#include <stddef.h>

int mzb_taskbench_main(int argc, char **argv); /* taskbench.c */
int mzb_metg_main(int argc, char **argv);      /* metg.c */
int mzb_pipeline_main(int argc, char **argv);  /* pipeline.c */
int mzb_trace_main(int argc, char **argv);     /* trace.c */
int mzb_simnet_main(int argc, char **argv);    /* simnet.c */
#if defined(MZB_HAVE_MPI) && MZB_HAVE_MPI
int mzb_mpi_metg_main(int argc, char **argv);  /* tb_mpi.c */
int mzb_mpi_weak_main(int argc, char **argv);  /* tb_mpi.c */
/* Start MPI once (MPI_THREAD_MULTIPLE; finalized at exit); 0 or -1 with a
 * message.  This process's rank in MPI_COMM_WORLD (0 without MPI). */
int mzb_mpi_start(char *err, size_t errsz);
int mzb_mpi_rank(void);
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- a small JSON reader (trace.c) ----
 *
 * Enough JSON for trace-event files: objects, arrays, strings with every
 * escape (\uXXXX and surrogate pairs become UTF-8), numbers, true, false,
 * null.  Nesting deeper than 256 is refused.  The whole tree lives in one
 * arena, freed by mzb_json_free. */
typedef enum mzb_jtype { MZB_JNULL, MZB_JBOOL, MZB_JNUM, MZB_JSTR, MZB_JARR, MZB_JOBJ } mzb_jtype;

typedef struct mzb_json {
  mzb_jtype type;
  uint32_t n;               /* arrays, objects: members; strings: bytes */
  union {
    double num;             /* numbers, booleans (0 or 1) */
    const char *str;        /* strings: NUL-terminated (may contain NULs from \u0000) */
    struct mzb_json *items; /* arrays, objects: n items */
  } u;
  const char *const *keys;  /* objects: n keys */
} mzb_json;

typedef struct mzb_jdoc mzb_jdoc; /* the arena and the root */

/* Parse len bytes.  On success return the document (root via
 * mzb_jdoc_root); on failure NULL and a message naming the line and column
 * in err. */
mzb_jdoc *mzb_json_parse(const char *text, size_t len, char *err, size_t errcap);
const mzb_json *mzb_jdoc_root(const mzb_jdoc *d);
void mzb_json_free(mzb_jdoc *d); /* NULL is a no-op */
/* The member named key of an object, or NULL (also for non-objects). */
const mzb_json *mzb_json_get(const mzb_json *obj, const char *key);

/* ---- MZ_TRACE files (trace.c) ----
 *
 * A trace-event file as maize writes it (src/trace.c): "M" events name
 * processes (devices) and threads (queues), "X" events are tasks (category
 * "task") and transfers (category "transfer", args.bytes), "s"/"f" events
 * are edges.  Times are in microseconds, as in the file. */
typedef struct mzb_slice {
  double ts, dur;
  unsigned pid, tid;
  const char *name, *cat; /* cat may be "" */
  uint64_t bytes;         /* args.bytes, 0 when absent */
  int64_t run;            /* args.run, -1 when absent */
  bool transfer;          /* cat == "transfer" */
  bool planned;           /* args.planned_ts and planned_dur: when the policy expected it */
  double planned_ts, planned_dur;
} mzb_slice;

typedef struct mzb_track {
  unsigned pid, tid;
  const char *name;       /* "process / thread", the process name cut at ": "
                             ("opencl 1 / queue 3"); owned by the trace */
  const char *process;    /* the process's full name, or NULL when unnamed */
} mzb_track;

typedef struct mzb_trace {
  mzb_jdoc *doc;
  mzb_slice *slices;
  size_t nslices;
  mzb_track *tracks;      /* sorted by pid, tid; every track an X uses */
  size_t ntracks;
  /* Problems Perfetto's importer would mind (counted while loading). */
  size_t flow_starts, flow_unmatched; /* "s" without an "f" of the same id, or the reverse */
  size_t unnamed_pids, unnamed_tids;  /* X events whose pid / tid no "M" event names */
  size_t negative_dur;                /* X events with dur < 0 */
  size_t ignored;                     /* events of other phases */
  int64_t last_run;                   /* the largest args.run, -1 when none */
} mzb_trace;

/* Load a trace file.  Returns 0, or 1 with a message in err (unreadable
 * file, malformed JSON, an "X" event without ph/ts/dur/pid/tid/name or
 * with a field of the wrong type).  Free with mzb_trace_free. */
int mzb_trace_load(const char *path, mzb_trace *t, char *err, size_t errcap);
int mzb_trace_parse(const char *text, size_t len, mzb_trace *t, char *err, size_t errcap);
void mzb_trace_free(mzb_trace *t);

/* The runs in the trace (args.run; `run` >= 0: that one only), in
 * increasing number, each with its first start and last end (us): up to
 * cap into out; returns how many there are (0 also on ENOMEM). */
typedef struct mzb_trace_run {
  int64_t run;
  double t0, t1;
} mzb_trace_run;
size_t mzb_trace_runs(const mzb_trace *t, int64_t run, mzb_trace_run *out, size_t cap);

/* The Gantt chart of the trace's slices of run `run` (-1: all runs) into
 * svg_path, each run's extent marked (dashed boundaries and a bracket
 * labelled with its makespan).  Returns 0 or a negative MZ_E* code. */
int mzb_trace_svg(const mzb_trace *t, int64_t run, const char *title, const char *svg_path);

/* The text summary of run `run` (-1: all): makespan, per device and queue
 * busy time and utilisation, op counts, top kernels, transfers. */
void mzb_trace_summary(const mzb_trace *t, int64_t run, FILE *out);

/* ---- the pipeline (pipeline.c) ---- */

typedef struct mzb_pipeline_opts {
  const char *devices; /* MZ_DEVICES syntax; NULL: $MZ_DEVICES, else "all" */
  const char *policy;  /* one policy; NULL: every registered policy */
  const char *outdir;  /* traces and SVGs; NULL: "maize-out" */
  size_t elements;     /* floats per buffer */
  unsigned tiles;
  unsigned reps;       /* runs per policy; the last is measured and drawn */
  bool quiet;          /* no device list or kernel-source lines */
} mzb_pipeline_opts;

/* Run the pipeline under each chosen policy, each in its own runtime with a
 * trace in outdir/pipeline-<policy>.json and a Gantt chart beside it
 * (.svg), verify every result against the CPU reference and print the
 * table on out.  Returns 0, or 1 after a message on stderr (a device, run
 * or verification failure, a file that cannot be written). */
int mzb_pipeline_run(const mzb_pipeline_opts *o, FILE *out);

#endif
