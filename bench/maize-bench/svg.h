/* A small SVG writer for maize-bench: line plots (METG
 * efficiency curves) and Gantt charts (traces).  Output is well-formed
 * XML: every text is escaped.  Functions return 0 or a negative MZ_E*
 * code (MZ_EIO when the file cannot be written, MZ_EINVAL on bad input). */
#ifndef MZB_SVG_H
#define MZB_SVG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One curve of a line plot: n points (x[i], y[i]), joined in increasing
 * x (whatever order they were measured in). */
typedef struct mzb_series {
  const char *name; /* legend label */
  const double *x;
  const double *y;
  size_t n;
  /* A point of interest on the plot's hline (the METG crossing), marked
   * with a ring and a dotted drop to the x axis when mark_x > 0. */
  double mark_x;
  /* Legend text after the name ("METG 3.1 µs", "failed"); may be NULL.
   * A series with no points still gets its legend entry. */
  const char *note;
} mzb_series;

typedef struct mzb_plot {
  const char *title;
  const char *xlabel;
  const char *ylabel;
  int logx;           /* log10 x axis (task granularity) */
  int logy;
  double ymin, ymax;  /* both 0: fit the data */
  double hline;       /* draw a dashed horizontal line at this y when > 0 (e.g. 0.5 efficiency) */
} mzb_plot;

int mzb_svg_lineplot(const char *path, const mzb_plot *plot, const mzb_series *series, size_t nseries);

/* One bar of a Gantt chart: [t0, t1) in ns on row `row`, coloured by
 * `kind` (same kind, same colour; e.g. the kernel name); transfers are
 * drawn as a dark strip in the lower half of the row, on top of the
 * kernels and at least 2 pixels wide, so that every copy shows. */
typedef struct mzb_gantt_op {
  uint64_t t0, t1;
  unsigned row;
  const char *kind;
  const char *label; /* tooltip (<title>) */
  int is_transfer;
} mzb_gantt_op;

/* A span to mark above the bars, such as a run: dashed lines across the
 * rows at t0 and t1 (ns, as the ops), and a bracket labelled `label`
 * ("run 2: makespan 41.7 ms"; shortened to what fits). */
typedef struct mzb_gantt_span {
  uint64_t t0, t1;
  const char *label;
} mzb_gantt_span;

int mzb_svg_gantt(const char *path, const char *title, const char *const *row_names, size_t nrows,
                  const mzb_gantt_op *ops, size_t nops, const mzb_gantt_span *spans, size_t nspans);

/* XML-escape s onto f (&, <, >, ", '). */
void mzb_xml_escape(FILE *f, const char *s);

#endif
