/* A small SVG writer for maize-bench: line plots and Gantt charts.
 *
 * Every text that comes from the caller goes through mzb_xml_escape, so
 * hostile names ("<&\"'>") still give well-formed XML.  Bytes below 0x20
 * other than tab and newline are not allowed in XML 1.0 at all: they are
 * written as '?'.  Files are written to "<path>.tmp" and renamed, so a
 * failed write never leaves half a file under the final name. */
#include "svg.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "maize/error.h"

void mzb_xml_escape(FILE *f, const char *s) {
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&apos;", f); break;
    default:
      if (c < 0x20 && c != '\t' && c != '\n') fputc('?', f);
      else fputc(c, f);
    }
  }
}

/* ---- files ---- */

static FILE *open_tmp(const char *path, char *tmp, size_t cap) {
  if (!path || !*path || (size_t)snprintf(tmp, cap, "%s.tmp", path) >= cap) return NULL;
  return fopen(tmp, "w");
}

static int close_tmp(FILE *f, const char *tmp, const char *path) {
  int bad = ferror(f);
  if (fclose(f) || bad || rename(tmp, path)) {
    remove(tmp);
    return MZ_EIO;
  }
  return MZ_OK;
}

/* A palette that stays readable on white (Tableau 10 plus a few). */
static const char *const palette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                                      "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#8c564b",
                                      "#17becf", "#bcbd22", "#7f7f7f", "#d62728"};
#define NPALETTE (sizeof palette / sizeof palette[0])

/* A "nice" step (1, 2 or 5 times a power of ten) for about n ticks over span. */
static double nice_step(double span, int n) {
  if (!(span > 0) || !isfinite(span)) return 1;
  double raw = span / n, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void fmt_num(char *buf, size_t cap, double v) {
  double a = fabs(v);
  if (v == 0) snprintf(buf, cap, "0");
  else if (a >= 1e6 || a < 1e-3) {
    int e = (int)floor(log10(a) + 1e-9);
    double m = v / pow(10, e);
    if (fabs(m - round(m)) < 1e-6) snprintf(buf, cap, "%.0fe%d", round(m), e); /* 1e6, 2e-4 */
    else snprintf(buf, cap, "%.2ge%d", m, e);
  }
  else snprintf(buf, cap, "%g", v);
}

/* ---- line plots ---- */

struct xy {
  double x, y;
};
static int cmp_xy(const void *a, const void *b) {
  const struct xy *p = a, *q = b;
  return (p->x > q->x) - (p->x < q->x);
}

#define LP_W 800
#define LP_H 500
#define LP_L 80  /* margins */
#define LP_R 200
#define LP_T 50
#define LP_B 60

int mzb_svg_lineplot(const char *path, const mzb_plot *plot, const mzb_series *series, size_t nseries) {
  if (!path || !plot || (nseries && !series)) return MZ_EINVAL;
  for (size_t s = 0; s < nseries; s++)
    if (series[s].n && (!series[s].x || !series[s].y)) return MZ_EINVAL;
  /* Data range over points that can be drawn (finite, positive on log axes). */
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (size_t s = 0; s < nseries; s++)
    for (size_t i = 0; i < series[s].n; i++) {
      double x = series[s].x[i], y = series[s].y[i];
      if (!isfinite(x) || !isfinite(y) || (plot->logx && x <= 0) || (plot->logy && y <= 0)) continue;
      double tx = plot->logx ? log10(x) : x, ty = plot->logy ? log10(y) : y;
      x0 = fmin(x0, tx), x1 = fmax(x1, tx), y0 = fmin(y0, ty), y1 = fmax(y1, ty);
    }
  if (!(x0 <= x1)) x0 = 0, x1 = 1;
  if (!(y0 <= y1)) y0 = 0, y1 = 1;
  if (plot->ymin != 0 || plot->ymax != 0) {
    if (!(plot->ymax > plot->ymin) || (plot->logy && plot->ymin <= 0)) return MZ_EINVAL;
    y0 = plot->logy ? log10(plot->ymin) : plot->ymin;
    y1 = plot->logy ? log10(plot->ymax) : plot->ymax;
  } else if (!plot->logy) {
    if (y0 > 0) y0 = 0; /* linear y axes start at zero */
    if (plot->hline > 0 && plot->hline > y1) y1 = plot->hline;
  }
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  if (y1 - y0 < 1e-12) y0 -= 0.5, y1 += 0.5;
  if (plot->logx) x0 = floor(x0), x1 = ceil(x1);
  if (plot->logy) y0 = floor(y0), y1 = ceil(y1);
  const double pw = LP_W - LP_L - LP_R, ph = LP_H - LP_T - LP_B;
#define PX(v) (LP_L + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (LP_T + ph - ((v) - y0) / (y1 - y0) * ph)

  char tmp[4096];
  FILE *f = open_tmp(path, tmp, sizeof tmp);
  if (!f) return MZ_EIO;
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          LP_W, LP_H, LP_W, LP_H);
  fputs("<text x=\"400\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">", f);
  mzb_xml_escape(f, plot->title);
  fputs("</text>\n", f);
  /* Axes, ticks, grid. */
  fprintf(f, "<g stroke=\"#888\" fill=\"none\"><rect x=\"%d\" y=\"%d\" width=\"%g\" height=\"%g\"/></g>\n", LP_L,
          LP_T, pw, ph);
  char num[64];
  double xs = plot->logx ? 1 : nice_step(x1 - x0, 8);
  for (double v = ceil(x0 / xs - 1e-9) * xs; v <= x1 + 1e-9 * xs; v += xs) {
    double x = PX(v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%g\" stroke=\"#eee\"/>\n", x, LP_T, x, LP_T + ph);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#888\"/>\n", x, LP_T + ph, x, LP_T + ph + 5);
    fmt_num(num, sizeof num, plot->logx ? pow(10, v) : v);
    fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", x, LP_T + ph + 19, num);
  }
  double ys = plot->logy ? 1 : nice_step(y1 - y0, 6);
  for (double v = ceil(y0 / ys - 1e-9) * ys; v <= y1 + 1e-9 * ys; v += ys) {
    double y = PY(v);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#eee\"/>\n", LP_L, y, LP_L + pw, y);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#888\"/>\n", LP_L - 5, y, LP_L, y);
    fmt_num(num, sizeof num, plot->logy ? pow(10, v) : v);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", LP_L - 8, y + 4, num);
  }
  fprintf(f, "<text x=\"%g\" y=\"%d\" text-anchor=\"middle\">", LP_L + pw / 2, LP_H - 15);
  mzb_xml_escape(f, plot->xlabel);
  fprintf(f, "</text>\n<text transform=\"translate(20 %g) rotate(-90)\" text-anchor=\"middle\">", LP_T + ph / 2);
  mzb_xml_escape(f, plot->ylabel);
  fputs("</text>\n", f);
  if (plot->hline > 0 && (!plot->logy || plot->hline > 0)) {
    double hv = plot->logy ? log10(plot->hline) : plot->hline;
    if (hv >= y0 && hv <= y1)
      fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#444\" stroke-dasharray=\"6 4\"/>\n",
              LP_L, PY(hv), LP_L + pw, PY(hv));
  }
  /* Series: a polyline through the drawable points in increasing x (a
   * sweep measured coarse to fine, or noisy, would otherwise zigzag),
   * markers with tooltips, the mark on the hline, and a legend entry even
   * for a series without points. */
  size_t maxn = 0;
  for (size_t s = 0; s < nseries; s++)
    if (series[s].n > maxn) maxn = series[s].n;
  struct xy *pts = malloc((maxn ? maxn : 1) * sizeof *pts);
  if (!pts) {
    fclose(f);
    remove(tmp);
    return MZ_ENOMEM;
  }
  for (size_t s = 0; s < nseries; s++) {
    const char *col = palette[s % NPALETTE];
    size_t np = 0;
    for (size_t i = 0; i < series[s].n; i++) {
      double x = series[s].x[i], y = series[s].y[i];
      if (!isfinite(x) || !isfinite(y) || (plot->logx && x <= 0) || (plot->logy && y <= 0)) continue;
      pts[np++] = (struct xy){x, y};
    }
    qsort(pts, np, sizeof *pts, cmp_xy);
    fprintf(f, "<g><polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
    for (size_t i = 0; i < np; i++) {
      double tx = plot->logx ? log10(pts[i].x) : pts[i].x, ty = plot->logy ? log10(pts[i].y) : pts[i].y;
      ty = fmin(fmax(ty, y0), y1);
      fprintf(f, "%.1f,%.1f ", PX(tx), PY(ty));
    }
    fputs("\"/>\n", f);
    for (size_t i = 0; i < np; i++) {
      double tx = plot->logx ? log10(pts[i].x) : pts[i].x, ty = plot->logy ? log10(pts[i].y) : pts[i].y;
      ty = fmin(fmax(ty, y0), y1);
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", PX(tx), PY(ty), col);
      mzb_xml_escape(f, series[s].name);
      fprintf(f, ": (%g, %g)</title></circle>\n", pts[i].x, pts[i].y);
    }
    double mx = series[s].mark_x;
    if (mx > 0 && isfinite(mx) && plot->hline > 0) {
      double tx = plot->logx ? log10(mx) : mx, hv = plot->logy ? log10(plot->hline) : plot->hline;
      if (tx >= x0 && tx <= x1 && hv >= y0 && hv <= y1) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%g\" stroke=\"%s\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"2 3\"/>\n",
                PX(tx), PY(hv), PX(tx), LP_T + ph, col);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"white\" stroke=\"%s\" stroke-width=\"2.5\"><title>",
                PX(tx), PY(hv), col);
        mzb_xml_escape(f, series[s].name);
        if (series[s].note) {
          fputs(": ", f);
          mzb_xml_escape(f, series[s].note);
        }
        fputs("</title></circle>\n", f);
      }
    }
    fputs("</g>\n", f);
    /* Legend entry: the name, and the note on a second line. */
    double ly = LP_T + 10 + 34.0 * (double)s;
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"/>", LP_W - LP_R + 15.0,
            ly, LP_W - LP_R + 40.0, ly, col);
    fprintf(f, "<text x=\"%g\" y=\"%g\">", LP_W - LP_R + 46.0, ly + 4);
    mzb_xml_escape(f, series[s].name);
    fputs("</text>\n", f);
    if (series[s].note && *series[s].note) {
      fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"11\" fill=\"#444\">", LP_W - LP_R + 46.0, ly + 18);
      mzb_xml_escape(f, series[s].note);
      fputs("</text>\n", f);
    }
  }
  free(pts);
  fputs("</svg>\n", f);
#undef PX
#undef PY
  return close_tmp(f, tmp, path);
}

/* ---- Gantt charts ---- */

#define GT_L 230 /* room for row names */
#define GT_PW 1000
#define GT_R 20
#define GT_T 66 /* the title, then the spans' brackets */
#define GT_ROWH 22
#define GT_MINPX 2.0 /* bars narrower than this are merged with their neighbours, up to this width */
#define GT_XFER_FILL "#222222"

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

struct kind_stat {
  const char *name;
  uint64_t total;
};

static int cmp_kind_total(const void *a, const void *b) {
  const struct kind_stat *x = a, *y = b;
  if (x->total != y->total) return x->total > y->total ? -1 : 1;
  return strcmp(x->name, y->name);
}

struct opkey {
  unsigned row;
  uint64_t t0;
  size_t i;
};
static int cmp_op(const void *a, const void *b) {
  const struct opkey *x = a, *y = b;
  if (x->row != y->row) return x->row < y->row ? -1 : 1;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* The index of kind k among the sorted distinct kinds (binary search). */
static size_t kind_index(const char *const *kinds, size_t nk, const char *k) {
  size_t lo = 0, hi = nk;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(kinds[mid], k);
    if (c == 0) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return 0;
}

/* A bar waiting to be written: one op, or several merged sub-pixel ops. */
struct pending {
  bool live;
  double x0, x1;
  uint64_t t0, t1, busy;
  size_t first, count;
  size_t longest;       /* the op whose kind colours a merged bar */
  bool mixed, transfer;
};

static void fmt_time(char *buf, size_t cap, uint64_t ns) {
  if (ns >= 10000000) snprintf(buf, cap, "%.2f ms", (double)ns / 1e6);
  else if (ns >= 10000) snprintf(buf, cap, "%.1f \xc2\xb5s", (double)ns / 1e3);
  else snprintf(buf, cap, "%llu ns", (unsigned long long)ns);
}

/* Write the pending bar at row top y.  Kernels fill the row; transfers
 * (the second pass) are a dark strip in its lower half, on top, at least
 * GT_MINPX wide, so a copy never hides under or inside a kernel's bar. */
static void flush_bar(FILE *f, struct pending *p, const mzb_gantt_op *ops, const char *const *kinds, size_t nk,
                      double y) {
  if (!p->live) return;
  const mzb_gantt_op *o = &ops[p->count > 1 ? p->longest : p->first];
  double w = p->x1 - p->x0, h = GT_ROWH - 6;
  if (w < 0.5) w = 0.5;
  const char *fill;
  if (p->transfer) {
    fill = GT_XFER_FILL;
    if (w < GT_MINPX) w = GT_MINPX;
    y += h / 2;
    h /= 2;
  } else {
    fill = palette[kind_index(kinds, nk, o->kind ? o->kind : "") % NPALETTE];
  }
  char d[64];
  fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%g\" fill=\"%s\"><title>", p->x0, y, w, h, fill);
  if (p->count == 1) {
    mzb_xml_escape(f, o->label && *o->label ? o->label : o->kind);
    fmt_time(d, sizeof d, p->t1 - p->t0);
    fprintf(f, " (%s)", d);
  } else {
    fmt_time(d, sizeof d, p->busy);
    fprintf(f, "%zu %s merged (each under %g pixels), %s busy%s; longest: ", p->count,
            p->transfer ? "transfers" : "ops", GT_MINPX, d, p->mixed ? ", several kinds" : "");
    mzb_xml_escape(f, o->kind);
  }
  fputs("</title></rect>\n", f);
  p->live = false;
}

/* Width in pixels of text at font-size 11, roughly (sans-serif). */
static double text_px(const char *s) { return 6.2 * (double)strlen(s); }

int mzb_svg_gantt(const char *path, const char *title, const char *const *row_names, size_t nrows,
                  const mzb_gantt_op *ops, size_t nops, const mzb_gantt_span *spans, size_t nspans) {
  if (!path || (nrows && !row_names) || (nops && !ops) || (nspans && !spans)) return MZ_EINVAL;
  for (size_t i = 0; i < nspans; i++)
    if (spans[i].t1 < spans[i].t0) return MZ_EINVAL;
  for (size_t i = 0; i < nops; i++)
    if (ops[i].row >= nrows || ops[i].t1 < ops[i].t0) return MZ_EINVAL;
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (size_t i = 0; i < nops; i++) {
    if (ops[i].t0 < t0) t0 = ops[i].t0;
    if (ops[i].t1 > t1) t1 = ops[i].t1;
  }
  if (!nops) t0 = 0, t1 = 1;
  if (t1 == t0) t1 = t0 + 1;
  /* Distinct kinds, sorted: colours follow the sorted order, so charts of
   * the same kernels (one per policy) colour them alike. */
  struct opkey *order = malloc((nops ? nops : 1) * sizeof *order);
  const char **kinds = malloc((nops ? nops : 1) * sizeof *kinds);
  struct kind_stat *ks = NULL;
  FILE *f = NULL;
  int rc = MZ_ENOMEM;
  if (!order || !kinds) goto out;
  size_t nk = 0;
  /* Transfers are drawn alike (a dark strip), whatever their names. */
  size_t nnt = 0;
  for (size_t i = 0; i < nops; i++)
    if (!ops[i].is_transfer) kinds[nnt++] = ops[i].kind ? ops[i].kind : "";
  if (nnt) qsort(kinds, nnt, sizeof *kinds, cmp_str);
  for (size_t i = 0; i < nnt; i++)
    if (!nk || strcmp(kinds[nk - 1], kinds[i])) kinds[nk++] = kinds[i];
  ks = calloc(nk ? nk : 1, sizeof *ks);
  if (!ks) goto out;
  for (size_t k = 0; k < nk; k++) ks[k].name = kinds[k];
  bool any_transfer = false;
  for (size_t i = 0; i < nops; i++) {
    if (ops[i].is_transfer) any_transfer = true;
    else ks[kind_index(kinds, nk, ops[i].kind ? ops[i].kind : "")].total += ops[i].t1 - ops[i].t0;
  }
  for (size_t i = 0; i < nops; i++) order[i] = (struct opkey){.row = ops[i].row, .t0 = ops[i].t0, .i = i};
  if (nops) qsort(order, nops, sizeof *order, cmp_op);

  char tmp[4096];
  f = open_tmp(path, tmp, sizeof tmp);
  rc = MZ_EIO;
  if (!f) goto out;
  const uint64_t span = t1 - t0;
  const double pw = GT_PW;
  size_t nlegend = nk < 12 ? nk : 12;
  int legend_rows = (int)((nlegend + (any_transfer ? 1 : 0) + 3) / 4);
  int ph = (int)nrows * GT_ROWH;
  int H = GT_T + ph + 50 + legend_rows * 20 + 10;
  int W = GT_L + GT_PW + GT_R;
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H, W, H);
  fprintf(f, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">", W / 2);
  mzb_xml_escape(f, title);
  fputs("</text>\n", f);
  /* Rows: alternate shading and names. */
  for (size_t r = 0; r < nrows; r++) {
    int y = GT_T + (int)r * GT_ROWH;
    if (r % 2) fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f4f4f4\"/>\n", GT_L, y, GT_PW, GT_ROWH);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", GT_L - 6, y + GT_ROWH - 7);
    mzb_xml_escape(f, row_names[r] ? row_names[r] : "");
    fputs("</text>\n", f);
  }
  /* Time axis in ms or us from the first op's start. */
  bool ms = span >= 2000000;
  double unit = ms ? 1e6 : 1e3;
  double step = nice_step((double)span / unit, 10);
  for (double v = 0; v <= (double)span / unit + 1e-9; v += step) {
    double x = GT_L + v * unit / (double)span * pw;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, GT_T, x, GT_T + ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, GT_T + ph + 16, v);
  }
  fprintf(f, "<text x=\"%g\" y=\"%d\" text-anchor=\"middle\">time (%s)</text>\n", GT_L + pw / 2, GT_T + ph + 34,
          ms ? "ms" : "\xc2\xb5s");
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", GT_L, GT_T, GT_PW, ph);
  /* Bars.  Within a row, a bar under GT_MINPX wide that starts within
   * GT_MINPX of the pending bar's end joins it while the pending bar is
   * under GT_MINPX wide, so the file stays bounded by about rows x width /
   * GT_MINPX bars whatever the op count.  A merged bar takes the colour of
   * its longest op and says in its tooltip how many it holds.  Kernels
   * first, then transfers on top (merged only with transfers). */
  for (int pass = 0; pass < 2; pass++) {
    struct pending p = {0};
    unsigned row = 0;
    for (size_t j = 0; j < nops; j++) {
      const mzb_gantt_op *o = &ops[order[j].i];
      if ((o->is_transfer != 0) != (pass == 1)) continue;
      if (o->row != row) {
        flush_bar(f, &p, ops, kinds, nk, GT_T + row * GT_ROWH + 3.0);
        row = o->row;
      }
      double x0 = GT_L + (double)(o->t0 - t0) / (double)span * pw;
      double x1 = GT_L + (double)(o->t1 - t0) / (double)span * pw;
      bool tiny = x1 - x0 < GT_MINPX;
      if (p.live && tiny && x0 - p.x1 < GT_MINPX && p.x1 - p.x0 < GT_MINPX) {
        if (o->t1 - o->t0 > ops[p.longest].t1 - ops[p.longest].t0) p.longest = order[j].i;
        if (x1 > p.x1) p.x1 = x1;
        if (o->t1 > p.t1) p.t1 = o->t1;
        p.busy += o->t1 - o->t0;
        p.count++;
        if (strcmp(o->kind ? o->kind : "", ops[p.first].kind ? ops[p.first].kind : "")) p.mixed = true;
        continue;
      }
      flush_bar(f, &p, ops, kinds, nk, GT_T + row * GT_ROWH + 3.0);
      p = (struct pending){.live = true, .x0 = x0, .x1 = x1, .t0 = o->t0, .t1 = o->t1, .busy = o->t1 - o->t0,
                           .first = order[j].i, .longest = order[j].i, .count = 1, .transfer = pass == 1};
    }
    flush_bar(f, &p, ops, kinds, nk, GT_T + row * GT_ROWH + 3.0);
  }
  /* Spans (runs): dashed boundaries across the rows and a labelled
   * bracket above them; the label shrinks to what fits (the full text
   * stays in the tooltip). */
  for (size_t i = 0; i < nspans; i++) {
    uint64_t a = spans[i].t0 < t0 ? t0 : spans[i].t0, b = spans[i].t1 > t1 ? t1 : spans[i].t1;
    if (b < a) continue;
    double xa = GT_L + (double)(a - t0) / (double)span * pw, xb = GT_L + (double)(b - t0) / (double)span * pw;
    int by = GT_T - 14;
    fprintf(f, "<g stroke=\"#555\" stroke-dasharray=\"4 3\"><line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
               "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/></g>\n",
            xa, by, xa, GT_T + ph, xb, by, xb, GT_T + ph);
    fprintf(f, "<path d=\"M%.1f %d V%d H%.1f V%d\" fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\"><title>", xa,
            by + 6, by, xb, by + 6);
    mzb_xml_escape(f, spans[i].label);
    fputs("</title></path>\n", f);
    const char *label = spans[i].label ? spans[i].label : "";
    double room = xb - xa - 4;
    if (*label && room > 5) {
      /* The whole label, else its part before ':' ("run 2"), else that
       * without "run " ("2"), else nothing. */
      char buf[160];
      const char *show = buf;
      snprintf(buf, sizeof buf, "%s", label);
      if (text_px(show) > room) {
        char *colon = strchr(buf, ':');
        if (colon) *colon = 0;
      }
      if (text_px(show) > room && !strncmp(show, "run ", 4)) show += 4;
      if (text_px(show) <= room) {
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">", (xa + xb) / 2, by - 4);
        mzb_xml_escape(f, show);
        fputs("</text>\n", f);
      }
    }
  }
  /* Legend: the kinds with the most time, then transfers and merged bars. */
  if (nk) qsort(ks, nk, sizeof *ks, cmp_kind_total);
  int ly = GT_T + ph + 56;
  size_t slot = 0;
  for (size_t k = 0; k < nlegend + (any_transfer ? 1 : 0) + (nk > nlegend ? 1 : 0); k++) {
    int lx = GT_L + (int)(slot % 4) * 250, yy = ly + (int)(slot / 4) * 20;
    slot++;
    if (k < nlegend) {
      fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">", lx, yy - 10,
              palette[kind_index(kinds, nk, ks[k].name) % NPALETTE], lx + 20, yy);
      mzb_xml_escape(f, ks[k].name);
      fputs("</text>\n", f);
    } else if (k == nlegend && any_transfer) {
      fprintf(f,
              "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"6\" fill=\"" GT_XFER_FILL "\"/>"
              "<text x=\"%d\" y=\"%d\">transfer (dark strip)</text>\n",
              lx, yy - 4, lx + 20, yy);
    } else {
      fprintf(f, "<text x=\"%d\" y=\"%d\">+%zu more kinds</text>\n", lx, yy, nk - nlegend);
    }
  }
  fputs("</svg>\n", f);
  rc = close_tmp(f, tmp, path);
out:
  free(order);
  free(kinds);
  free(ks);
  return rc;
}
