/* SVG writer: not written yet (issue 6). */
#include "svg.h"

#include "maize/error.h"

int mzb_svg_lineplot(const char *path, const mzb_plot *plot, const mzb_series *series, size_t nseries) {
  (void)path, (void)plot, (void)series, (void)nseries;
  return MZ_ENOTSUP;
}

int mzb_svg_gantt(const char *path, const char *title, const char *const *row_names, size_t nrows,
                  const mzb_gantt_op *ops, size_t nops) {
  (void)path, (void)title, (void)row_names, (void)nrows, (void)ops, (void)nops;
  return MZ_ENOTSUP;
}

void mzb_xml_escape(FILE *f, const char *s) { fputs(s, f); }
