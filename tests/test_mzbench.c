/* test_mzbench: the visual and pipeline parts of maize-bench.
 *
 * Checks that the JSON reader accepts what trace files hold (escapes,
 * surrogate pairs, numbers) and refuses malformed input with a message,
 * never crashing (truncations of a valid document, deep nesting, bad
 * escapes and numbers); that the SVG writers (line plot, Gantt chart)
 * write well-formed XML, by a small well-formedness checker here (balanced
 * tags, one root, quoted attributes, only known entities, no raw '<' or
 * '&'), even with hostile names such as <&"'> and control characters, and
 * that 100,000 ops give a Gantt file of bounded size; and that a real
 * pipeline run writes a trace that follows Perfetto's rules for Chrome
 * trace-event JSON: every "X" event has ph, ts, dur >= 0, pid, tid and
 * name, every flow start "s" has a finish "f" of the same id, and every
 * pid and tid used is named by "M" events; transfers between devices
 * appear as "transfer" slices with their bytes when OpenCL devices exist;
 * and that it writes the graph as DOT with every task placed. */
#include <criterion/criterion.h>
#include <maize.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mzb.h"
#include "svg.h"

/* Every test has a deadline: one that hangs is reported by name
 * as timed out instead of blocking the suite (a test may set its own). */
TestSuite(mzbench, .timeout = 120);

/* ---- a minimal XML well-formedness checker ---- */

static bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == ':' || c == '.';
}

/* An entity at p ('&'): one of the five, or a character reference. */
static bool entity_ok(const char **pp) {
  const char *p = *pp;
  static const char *const ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  for (int i = 0; i < 5; i++)
    if (!strncmp(p, ents[i], strlen(ents[i]))) {
      *pp = p + strlen(ents[i]);
      return true;
    }
  if (p[1] == '#') {
    const char *q = p + 2;
    bool hex = *q == 'x';
    if (hex) q++;
    const char *d = q;
    while ((*q >= '0' && *q <= '9') || (hex && ((*q >= 'a' && *q <= 'f') || (*q >= 'A' && *q <= 'F')))) q++;
    if (q > d && *q == ';') {
      *pp = q + 1;
      return true;
    }
  }
  return false;
}

/* Returns NULL when well-formed, else what is wrong. */
static const char *xml_check(const char *s) {
  static char why[200];
  const char *stack[256];
  size_t stlen[256];
  int depth = 0, roots = 0;
  const char *p = s;
  if (!strncmp(p, "<?xml", 5)) {
    p = strstr(p, "?>");
    if (!p) return "unterminated prolog";
    p += 2;
  }
  while (*p) {
    if (*p == '<') {
      if (!strncmp(p, "<!--", 4)) {
        const char *e = strstr(p, "-->");
        if (!e) return "unterminated comment";
        p = e + 3;
        continue;
      }
      bool close = p[1] == '/';
      const char *n = p + (close ? 2 : 1), *q = n;
      while (name_char(*q)) q++;
      if (q == n) return "a tag without a name";
      size_t nl = (size_t)(q - n);
      if (close) {
        while (*q == ' ' || *q == '\n') q++;
        if (*q != '>') return "junk in a closing tag";
        if (!depth) return "a closing tag without an opening one";
        depth--;
        if (stlen[depth] != nl || strncmp(stack[depth], n, nl)) {
          snprintf(why, sizeof why, "</%.*s> closes <%.*s>", (int)nl, n, (int)stlen[depth], stack[depth]);
          return why;
        }
        p = q + 1;
        continue;
      }
      if (!depth && roots++) return "more than one root element";
      /* Attributes. */
      for (;;) {
        while (*q == ' ' || *q == '\n' || *q == '\t') q++;
        if (*q == '>' || (q[0] == '/' && q[1] == '>')) break;
        const char *a = q;
        while (name_char(*q)) q++;
        if (q == a) return "bad attribute name";
        if (*q++ != '=') return "attribute without '='";
        char quote = *q++;
        if (quote != '"' && quote != '\'') return "unquoted attribute";
        while (*q && *q != quote) {
          if (*q == '<') return "'<' in an attribute";
          if (*q == '&' && !entity_ok(&q)) return "bad entity in an attribute";
          else if (*q != '&') q++;
        }
        if (!*q) return "unterminated attribute";
        q++;
      }
      if (*q == '/') {
        p = q + 2;
        continue;
      }
      if (depth == 256) return "too deep";
      stack[depth] = n;
      stlen[depth] = nl;
      depth++;
      p = q + 1;
      continue;
    }
    if (*p == '&') {
      if (!entity_ok(&p)) return "bad entity in text";
      continue;
    }
    if (!depth && !(*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) return "text outside the root";
    if ((unsigned char)*p < 0x20 && *p != '\n' && *p != '\t' && *p != '\r') return "a control character";
    p++;
  }
  if (depth) return "unclosed elements at the end";
  if (roots != 1) return "no root element";
  return NULL;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b) b[n] = 0;
  if (len) *len = (size_t)n;
  fclose(f);
  return b;
}

static void tmpdir(char *buf, size_t cap) {
  snprintf(buf, cap, "/tmp/mzbench-test-XXXXXX");
  cr_assert_not_null(mkdtemp(buf));
}

static void expect_wellformed(const char *path) {
  char *s = slurp(path, NULL);
  cr_assert_not_null(s, "cannot read %s", path);
  const char *why = xml_check(s);
  cr_expect_null(why, "%s is not well-formed: %s", path, why ? why : "");
  free(s);
}

static const char *const HOSTILE = "<&\"'> ]]> &amp; \x01\x1f tab\t";

/* ---- the checker itself ---- */

Test(mzbench, xml_checker_catches_mistakes) {
  cr_expect_null(xml_check("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/>t &amp; &#181;</a>\n"));
  cr_expect_not_null(xml_check("<a><b></a></b>"));
  cr_expect_not_null(xml_check("<a>x & y</a>"));
  cr_expect_not_null(xml_check("<a>x < y</a>"));
  cr_expect_not_null(xml_check("<a t=\"<\"/>"));
  cr_expect_not_null(xml_check("<a/><b/>"));
  cr_expect_not_null(xml_check("<a>"));
  cr_expect_not_null(xml_check("<a>\x01</a>"));
}

Test(mzbench, xml_escape_escapes_everything) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  mzb_xml_escape(f, "<&\"'>\x01ok");
  mzb_xml_escape(f, NULL);
  fclose(f);
  cr_expect_str_eq(buf, "&lt;&amp;&quot;&apos;&gt;?ok");
  free(buf);
}

/* ---- SVG writers ---- */

Test(mzbench, lineplot_is_wellformed_with_hostile_names) {
  char dir[64], path[128];
  tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/plot.svg", dir);
  double x[] = {1e2, 1e3, 1e4, 1e5}, y1[] = {0.1, 0.4, 0.8, 0.95}, y2[] = {0.05, 0.2, NAN, 0.9};
  /* Points out of x order (joined sorted), a mark on the 0.5 line, a note,
   * and a series without points (its legend entry only). */
  double xu[] = {1e4, 1e2, 1e5, 1e3};
  mzb_series s[] = {{HOSTILE, xu, y1, 4, 3e3, HOSTILE}, {"maize & <friends>", x, y2, 4, 0, NULL},
                    {"starpu", NULL, NULL, 0, 0, "failed"}};
  mzb_plot p = {.title = HOSTILE, .xlabel = HOSTILE, .ylabel = "efficiency \"%\"", .logx = 1, .hline = 0.5};
  cr_assert_eq(mzb_svg_lineplot(path, &p, s, 3), MZ_OK);
  expect_wellformed(path);
  size_t len;
  char *text = slurp(path, &len);
  cr_assert_not_null(text);
  /* Every polyline runs left to right. */
  unsigned nlines = 0;
  for (const char *q = text; (q = strstr(q, "points=\"")) != NULL; nlines++) {
    q += 8;
    double px, py, last = -INFINITY;
    int used;
    while (sscanf(q, "%lf,%lf %n", &px, &py, &used) == 2) {
      cr_expect_geq(px, last, "polyline %u: x goes back, %g after %g", nlines, px, last);
      last = px;
      q += used;
    }
  }
  cr_expect_eq(nlines, 3);
  cr_expect(strstr(text, "stroke-width=\"2.5\"") != NULL, "the METG mark");
  cr_expect(strstr(text, ">starpu</text>") != NULL && strstr(text, ">failed</text>") != NULL,
            "a series without points is in the legend");
  free(text);
  /* Log y, fixed range, no series. */
  mzb_plot q = {.title = "empty", .logy = 1, .ymin = 0.01, .ymax = 10};
  cr_assert_eq(mzb_svg_lineplot(path, &q, NULL, 0), MZ_OK);
  expect_wellformed(path);
  /* Bad input and unwritable paths. */
  mzb_plot bad = {.ymin = 2, .ymax = 1};
  cr_expect_eq(mzb_svg_lineplot(path, &bad, s, 2), MZ_EINVAL);
  cr_expect_eq(mzb_svg_lineplot(NULL, &p, s, 2), MZ_EINVAL);
  cr_expect_eq(mzb_svg_lineplot("/nonexistent-dir/x.svg", &p, s, 2), MZ_EIO);
  remove(path);
  rmdir(dir);
}

Test(mzbench, gantt_is_wellformed_with_hostile_names) {
  char dir[64], path[128];
  tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/g.svg", dir);
  const char *rows[] = {HOSTILE, "cpu 0 / queue 1", NULL};
  mzb_gantt_op ops[] = {
      {0, 1000, 0, HOSTILE, HOSTILE, 0},
      {500, 2000, 1, "add", "add <run 1>", 0},
      {2000, 2500, 1, "copy host\xe2\x86\x92opencl 1", "copy & more", 1},
      {2500, 2500, 2, "zero", NULL, 0},
  };
  const mzb_gantt_span spans[] = {{0, 1000, HOSTILE}, {500, 2500, "run 2: makespan 2 \xc2\xb5s"}};
  cr_assert_eq(mzb_svg_gantt(path, HOSTILE, rows, 3, ops, 4, spans, 2), MZ_OK);
  expect_wellformed(path);
  cr_assert_eq(mzb_svg_gantt(path, "empty", NULL, 0, NULL, 0, NULL, 0), MZ_OK);
  expect_wellformed(path);
  mzb_gantt_op bad_row = {0, 1, 7, "x", "x", 0}, backwards = {5, 1, 0, "x", "x", 0};
  cr_expect_eq(mzb_svg_gantt(path, "t", rows, 3, &bad_row, 1, NULL, 0), MZ_EINVAL);
  cr_expect_eq(mzb_svg_gantt(path, "t", rows, 3, &backwards, 1, NULL, 0), MZ_EINVAL);
  const mzb_gantt_span bad_span = {5, 1, "backwards"};
  cr_expect_eq(mzb_svg_gantt(path, "t", rows, 3, ops, 4, &bad_span, 1), MZ_EINVAL);
  cr_expect_eq(mzb_svg_gantt(path, "t", rows, 3, ops, 4, NULL, 1), MZ_EINVAL);
  cr_expect_eq(mzb_svg_gantt("/nonexistent-dir/g.svg", "t", rows, 3, ops, 4, NULL, 0), MZ_EIO);
  remove(path);
  rmdir(dir);
}

Test(mzbench, gantt_of_100k_ops_stays_small, .timeout = 60) {
  char dir[64], path[128];
  tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/big.svg", dir);
  enum { N = 100000, ROWS = 8 };
  mzb_gantt_op *ops = calloc(N, sizeof *ops);
  cr_assert_not_null(ops);
  static const char *const kinds[] = {"scale", "square", "add", "saxpy", "copy"};
  const char *rows[ROWS];
  for (int r = 0; r < ROWS; r++) rows[r] = "queue";
  for (int i = 0; i < N; i++) {
    uint64_t t = (uint64_t)(i / ROWS) * 1000;
    ops[i] = (mzb_gantt_op){t, t + 900, (unsigned)(i % ROWS), kinds[i % 5], kinds[i % 5], i % 5 == 4};
  }
  /* One op much longer than the rest, so some bars are wide and some merge. */
  ops[0].t1 = 5000000;
  cr_assert_eq(mzb_svg_gantt(path, "100k ops", rows, ROWS, ops, N, NULL, 0), MZ_OK);
  size_t len = 0;
  char *s = slurp(path, &len);
  cr_assert_not_null(s);
  cr_expect_lt(len, (size_t)4 << 20, "a 100,000-op Gantt chart should stay under 4 MB, not %zu bytes", len);
  cr_expect_null(xml_check(s));
  free(s);
  free(ops);
  remove(path);
  rmdir(dir);
}

/* ---- maize-bench trace: runs marked, its own output name ---- */

Test(mzbench, trace_marks_runs_and_keeps_its_own_name, .timeout = 60) {
  const char *doc =
      "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"args\":{\"name\":\"cpu 0: x\"}},"
      "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"queue 0\"}},"
      "{\"ph\":\"X\",\"cat\":\"task\",\"name\":\"k\",\"pid\":0,\"tid\":0,\"ts\":10,\"dur\":100,\"args\":{\"run\":1}},"
      "{\"ph\":\"X\",\"cat\":\"task\",\"name\":\"k\",\"pid\":0,\"tid\":0,\"ts\":120,\"dur\":30,\"args\":{\"run\":1}},"
      "{\"ph\":\"X\",\"cat\":\"transfer\",\"name\":\"copy\",\"pid\":0,\"tid\":0,\"ts\":400,\"dur\":0.01,"
      "\"args\":{\"bytes\":64,\"run\":2}},"
      "{\"ph\":\"X\",\"cat\":\"task\",\"name\":\"k\",\"pid\":0,\"tid\":0,\"ts\":401,\"dur\":2000,\"args\":{\"run\":2}}]}";
  char dir[64], json[128], mine[160], theirs[160];
  tmpdir(dir, sizeof dir);
  snprintf(json, sizeof json, "%s/t.json", dir);
  snprintf(mine, sizeof mine, "%s/t.gantt.svg", dir);
  snprintf(theirs, sizeof theirs, "%s/t.svg", dir);
  FILE *f = fopen(json, "w");
  cr_assert_not_null(f);
  fputs(doc, f);
  fclose(f);
  /* The runs and their extents. */
  mzb_trace t;
  char err[300];
  cr_assert_eq(mzb_trace_load(json, &t, err, sizeof err), 0, "%s", err);
  mzb_trace_run runs[4];
  cr_assert_eq(mzb_trace_runs(&t, -1, runs, 4), 2);
  cr_expect(runs[0].run == 1 && runs[0].t0 == 10 && runs[0].t1 == 150);
  cr_expect(runs[1].run == 2 && runs[1].t0 == 400 && runs[1].t1 == 2401);
  cr_expect_eq(mzb_trace_runs(&t, 2, runs, 4), 1);
  cr_expect_eq(mzb_trace_runs(&t, 7, runs, 4), 0);
  mzb_trace_free(&t);
  /* The command: FILE.gantt.svg, never FILE.svg; a title without the
   * folders; each run bracketed with its makespan; the copy drawn. */
  FILE *pipe_chart = fopen(theirs, "w");
  cr_assert_not_null(pipe_chart);
  fputs("pipeline's chart", pipe_chart);
  fclose(pipe_chart);
  FILE *saved = stdout;
  stdout = fopen("/dev/null", "w");
  char *argv[] = {"trace", json, NULL};
  int rc = mzb_trace_main(2, argv);
  char *argv_bad[] = {"trace", json, "--run=7", NULL};
  int rc_bad = mzb_trace_main(3, argv_bad);
  char *argv_one[] = {"trace", "--run", "last", json, NULL};
  fclose(stdout);
  stdout = saved;
  cr_expect_eq(rc, 0);
  cr_expect_eq(rc_bad, 2, "a run the trace lacks");
  size_t len;
  char *text = slurp(theirs, &len);
  cr_expect(text && !strcmp(text, "pipeline's chart"), "maize-bench trace overwrote FILE.svg");
  free(text);
  expect_wellformed(mine);
  text = slurp(mine, &len);
  cr_assert_not_null(text);
  cr_expect(strstr(text, "maize trace t.json: 2 run(s), 1 device(s), 1 queue(s)") != NULL, "title");
  cr_expect(strstr(text, dir) == NULL, "the folder is not in the chart");
  cr_expect(strstr(text, "run 1: makespan 140.0 \xc2\xb5s") != NULL, "run 1's bracket");
  cr_expect(strstr(text, "run 2: makespan 2.00 ms") != NULL, "run 2's bracket");
  cr_expect(strstr(text, "fill=\"#222222\"><title>copy, 64 bytes") != NULL, "the copy is drawn");
  free(text);
  stdout = fopen("/dev/null", "w");
  rc = mzb_trace_main(4, argv_one);
  fclose(stdout);
  stdout = saved;
  cr_expect_eq(rc, 0);
  text = slurp(mine, &len);
  cr_assert_not_null(text);
  cr_expect(strstr(text, "run 2 of 2") != NULL && strstr(text, "run 1: makespan") == NULL, "--run last");
  free(text);
  remove(mine);
  remove(theirs);
  remove(json);
  rmdir(dir);
}

/* ---- the JSON reader ---- */

Test(mzbench, json_reads_what_traces_hold) {
  const char *doc = "{\"a\": [1, -2.5e3, 0, true, false, null], \"s\": \"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\","
                    " \"o\": {}, \"e\": []}";
  char err[200];
  mzb_jdoc *d = mzb_json_parse(doc, strlen(doc), err, sizeof err);
  cr_assert_not_null(d, "%s", err);
  const mzb_json *r = mzb_jdoc_root(d), *a = mzb_json_get(r, "a"), *s = mzb_json_get(r, "s");
  cr_assert_eq(r->type, MZB_JOBJ);
  cr_assert_not_null(a);
  cr_assert_eq(a->n, 6);
  cr_expect_eq(a->u.items[1].u.num, -2500.0);
  cr_expect_eq(a->u.items[3].type, MZB_JBOOL);
  cr_expect_eq(a->u.items[5].type, MZB_JNULL);
  cr_assert_not_null(s);
  cr_expect_str_eq(s->u.str, "q\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  cr_expect_eq(mzb_json_get(r, "o")->n, 0);
  cr_expect_null(mzb_json_get(r, "missing"));
  cr_expect_null(mzb_json_get(a, "a"));
  mzb_json_free(d);
  mzb_json_free(NULL);
}

Test(mzbench, json_refuses_malformed_input) {
  static const char *const bad[] = {
      "", " ", "{", "[", "[1,]", "[1 2]", "{\"a\" 1}", "{\"a\":}", "{1:2}", "{\"a\":1,}", "\"abc", "\"\\x\"",
      "\"\\u12G4\"", "\"a\nb\"", "01", "1.", "1e", "-", "+1", "tru", "nul", "[1]]", "{} {}", "\"\\ud800\\u0041\"",
      "[\x01]", "NaN", "Infinity",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[200] = "";
    mzb_jdoc *d = mzb_json_parse(bad[i], strlen(bad[i]), err, sizeof err);
    cr_expect_null(d, "accepted malformed JSON #%zu '%s'", i, bad[i]);
    cr_expect_neq(err[0], 0, "no message for #%zu", i);
    mzb_json_free(d);
  }
  /* Nesting beyond the limit is refused, not a stack overflow. */
  size_t n = 100000;
  char *deep = malloc(n);
  cr_assert_not_null(deep);
  memset(deep, '[', n);
  char err[200];
  cr_expect_null(mzb_json_parse(deep, n, err, sizeof err));
  cr_expect(strstr(err, "nesting") != NULL, "%s", err);
  free(deep);
}

Test(mzbench, trace_parser_survives_every_truncation) {
  const char *doc = "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"args\":{\"name\":\"cpu 0: x\"}},"
                    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"queue 0\"}},"
                    "{\"ph\":\"X\",\"cat\":\"task\",\"name\":\"k\",\"pid\":0,\"tid\":0,\"ts\":0.5,\"dur\":2,\"args\":{\"run\":1}},"
                    "{\"ph\":\"X\",\"cat\":\"transfer\",\"name\":\"copy\",\"pid\":0,\"tid\":0,\"ts\":3,\"dur\":1,"
                    "\"args\":{\"bytes\":4096,\"run\":1}},"
                    "{\"ph\":\"s\",\"cat\":\"edge\",\"name\":\"edge\",\"id\":1,\"pid\":0,\"tid\":0,\"ts\":2},"
                    "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"edge\",\"name\":\"edge\",\"id\":1,\"pid\":0,\"tid\":0,\"ts\":3}]}";
  mzb_trace t;
  char err[300];
  cr_assert_eq(mzb_trace_parse(doc, strlen(doc), &t, err, sizeof err), 0, "%s", err);
  cr_expect_eq(t.nslices, 2);
  cr_expect_eq(t.ntracks, 1);
  cr_expect_eq(t.flow_starts, 1);
  cr_expect_eq(t.flow_unmatched, 0);
  cr_expect_eq(t.unnamed_pids + t.unnamed_tids, 0);
  cr_expect_eq(t.last_run, 1);
  cr_expect_str_eq(t.tracks[0].name, "cpu 0 / queue 0");
  cr_expect(t.slices[1].transfer);
  cr_expect_eq(t.slices[1].bytes, 4096);
  mzb_trace_free(&t);
  for (size_t n = 0; n < strlen(doc); n++) {
    cr_expect_neq(mzb_trace_parse(doc, n, &t, err, sizeof err), 0, "accepted a trace cut at %zu", n);
  }
  /* Valid JSON that is not a valid trace. */
  static const char *const bad[] = {
      "42", "{\"events\":[]}", "[1]", "[{\"ph\":\"X\",\"ts\":0,\"dur\":1,\"pid\":0,\"tid\":0}]",
      "[{\"ph\":\"X\",\"ts\":\"0\",\"dur\":1,\"pid\":0,\"tid\":0,\"name\":\"a\"}]",
      "[{\"ph\":\"X\",\"ts\":0,\"dur\":1,\"pid\":-1,\"tid\":0,\"name\":\"a\"}]", "[{\"name\":\"no ph\"}]",
      "[{\"ph\":\"s\",\"name\":\"no id\"}]",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_expect_neq(mzb_trace_parse(bad[i], strlen(bad[i]), &t, err, sizeof err), 0, "accepted '%s'", bad[i]);
    cr_expect_neq(err[0], 0);
  }
  /* An unmatched flow and an unnamed thread are counted, not fatal. */
  const char *odd = "[{\"ph\":\"X\",\"ts\":0,\"dur\":-1,\"pid\":3,\"tid\":4,\"name\":\"a\"},"
                    "{\"ph\":\"s\",\"id\":9,\"cat\":\"edge\",\"name\":\"edge\",\"pid\":3,\"tid\":4,\"ts\":0}]";
  cr_assert_eq(mzb_trace_parse(odd, strlen(odd), &t, err, sizeof err), 0, "%s", err);
  cr_expect_eq(t.flow_unmatched, 1);
  cr_expect_eq(t.unnamed_pids, 1);
  cr_expect_eq(t.unnamed_tids, 1);
  cr_expect_eq(t.negative_dur, 1);
  mzb_trace_free(&t);
}

/* ---- a real pipeline run and its trace ---- */

struct flowkey {
  char key[128];
  int starts, finishes;
};

/* Check a maize trace against Perfetto's rules, walking the JSON itself
 * (independently of mzb_trace_parse's counters). */
static void check_perfetto_rules(const mzb_json *root, size_t *ntransfers, bool *has_opencl) {
  const mzb_json *evs = mzb_json_get(root, "traceEvents");
  cr_assert_not_null(evs, "no traceEvents");
  cr_assert_eq(evs->type, MZB_JARR);
  unsigned named_pid[64] = {0}, named_tid[64][64];
  memset(named_tid, 0, sizeof named_tid);
  struct flowkey *flows = calloc(evs->n + 1, sizeof *flows);
  size_t nflows = 0, nx = 0;
  cr_assert_not_null(flows);
  *ntransfers = 0;
  *has_opencl = false;
  /* Names first ("M" events may come anywhere). */
  for (uint32_t i = 0; i < evs->n; i++) {
    const mzb_json *e = &evs->u.items[i], *ph = mzb_json_get(e, "ph");
    cr_assert(ph && ph->type == MZB_JSTR, "event %u has no ph", i);
    if (strcmp(ph->u.str, "M")) continue;
    const mzb_json *nm = mzb_json_get(e, "name"), *pid = mzb_json_get(e, "pid"),
                   *an = mzb_json_get(mzb_json_get(e, "args"), "name");
    cr_assert(nm && pid && an && an->type == MZB_JSTR && pid->u.num < 64);
    if (!strcmp(nm->u.str, "process_name")) {
      named_pid[(unsigned)pid->u.num] = 1;
      if (strstr(an->u.str, "opencl")) *has_opencl = true;
    } else if (!strcmp(nm->u.str, "thread_name")) {
      const mzb_json *tid = mzb_json_get(e, "tid");
      cr_assert(tid && tid->type == MZB_JNUM && tid->u.num < 64);
      named_tid[(unsigned)pid->u.num][(unsigned)tid->u.num] = 1;
    }
  }
  for (uint32_t i = 0; i < evs->n; i++) {
    const mzb_json *e = &evs->u.items[i];
    const char *ph = mzb_json_get(e, "ph")->u.str;
    if (!strcmp(ph, "X")) {
      nx++;
      static const char *const need[] = {"ts", "dur", "pid", "tid"};
      for (int k = 0; k < 4; k++) {
        const mzb_json *v = mzb_json_get(e, need[k]);
        cr_assert(v && v->type == MZB_JNUM, "X event %u lacks a numeric %s", i, need[k]);
      }
      const mzb_json *nm = mzb_json_get(e, "name");
      cr_assert(nm && nm->type == MZB_JSTR && nm->n > 0, "X event %u lacks a name", i);
      cr_expect_geq(mzb_json_get(e, "dur")->u.num, 0.0, "X event %u has a negative dur", i);
      unsigned pid = (unsigned)mzb_json_get(e, "pid")->u.num, tid = (unsigned)mzb_json_get(e, "tid")->u.num;
      cr_assert(pid < 64 && tid < 64);
      cr_expect(named_pid[pid], "pid %u is not named", pid);
      cr_expect(named_tid[pid][tid], "tid %u of pid %u is not named", tid, pid);
      const mzb_json *cat = mzb_json_get(e, "cat");
      if (cat && !strcmp(cat->u.str, "transfer")) {
        (*ntransfers)++;
        const mzb_json *b = mzb_json_get(mzb_json_get(e, "args"), "bytes");
        cr_expect(b && b->type == MZB_JNUM && b->u.num > 0, "transfer %u has no bytes", i);
        cr_expect(!strncmp(nm->u.str, "copy ", 5) || !strncmp(nm->u.str, "read ", 5), "transfer named '%s'", nm->u.str);
      }
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
      const mzb_json *id = mzb_json_get(e, "id"), *cat = mzb_json_get(e, "cat"), *nm = mzb_json_get(e, "name");
      cr_assert(id && id->type == MZB_JNUM, "flow event %u lacks an id", i);
      cr_assert(mzb_json_get(e, "ts") && mzb_json_get(e, "pid") && mzb_json_get(e, "tid"));
      char key[128];
      snprintf(key, sizeof key, "%s/%s/%.0f", cat ? cat->u.str : "", nm ? nm->u.str : "", id->u.num);
      size_t k = 0;
      while (k < nflows && strcmp(flows[k].key, key)) k++;
      if (k == nflows) snprintf(flows[nflows++].key, sizeof flows[0].key, "%s", key);
      if (ph[0] == 's') flows[k].starts++;
      else flows[k].finishes++;
      if (ph[0] == 'f') {
        const mzb_json *bp = mzb_json_get(e, "bp");
        cr_expect(bp && !strcmp(bp->u.str, "e"), "flow finish %u should bind to the enclosing slice", i);
      }
    }
  }
  cr_expect_gt(nx, 0, "no X events");
  for (size_t k = 0; k < nflows; k++)
    cr_expect(flows[k].starts == 1 && flows[k].finishes == 1, "flow %s: %d starts, %d finishes", flows[k].key,
              flows[k].starts, flows[k].finishes);
  free(flows);
}

static int by_track_ts(const void *a, const void *b) {
  const mzb_slice *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* Viewers nest the slices of one track by time: a slice that starts inside
 * another must end inside it too, or it is drawn wrong.  maize's slices
 * never overlap at all (times in whole nanoseconds). */
static void expect_no_misnesting(const mzb_trace *t) {
  mzb_slice *v = malloc((t->nslices + 1) * sizeof *v);
  cr_assert_not_null(v);
  memcpy(v, t->slices, t->nslices * sizeof *v);
  qsort(v, t->nslices, sizeof *v, by_track_ts);
  size_t bad = 0;
  for (size_t i = 1; i < t->nslices; i++) {
    if (v[i].pid != v[i - 1].pid || v[i].tid != v[i - 1].tid) continue;
    long long end = llround((v[i - 1].ts + v[i - 1].dur) * 1000), start = llround(v[i].ts * 1000);
    if (end > start) {
      if (!bad) cr_log_error("'%s' ends %lld ns into '%s' on track %u/%u", v[i - 1].name, end - start, v[i].name,
                             v[i].pid, v[i].tid);
      bad++;
    }
  }
  cr_expect_eq(bad, 0, "%zu of %zu slices overlap the next one on their track", bad, t->nslices);
  free(v);
}

static void pipeline_and_check(const char *policy, const char *devices) {
  char dir[64], json[160], svg[160];
  tmpdir(dir, sizeof dir);
  mzb_pipeline_opts o = {.devices = devices, .policy = policy, .outdir = dir, .elements = 20000, .tiles = 4,
                         .reps = 2, .quiet = true};
  FILE *devnull = fopen("/dev/null", "w");
  cr_assert_not_null(devnull);
  int rc = mzb_pipeline_run(&o, devnull);
  fclose(devnull);
  cr_assert_eq(rc, 0, "the pipeline failed under %s", policy);
  snprintf(json, sizeof json, "%s/pipeline-%s.json", dir, policy);
  snprintf(svg, sizeof svg, "%s/pipeline-%s.svg", dir, policy);
  size_t len;
  char *text = slurp(json, &len);
  cr_assert_not_null(text, "no trace at %s", json);
  char err[300];
  mzb_jdoc *d = mzb_json_parse(text, len, err, sizeof err);
  cr_assert_not_null(d, "the trace is not JSON: %s", err);
  size_t ntransfers;
  bool has_opencl;
  check_perfetto_rules(mzb_jdoc_root(d), &ntransfers, &has_opencl);
  /* Round-robin spreads the tiles' stages over every queue, so with
   * OpenCL devices tiles move between memories. */
  if (has_opencl && !strcmp(policy, "round-robin")) cr_expect_gt(ntransfers, 0, "no transfer slices in the trace");
  mzb_json_free(d);
  /* The loader agrees, and the chart is well-formed. */
  mzb_trace t;
  cr_assert_eq(mzb_trace_parse(text, len, &t, err, sizeof err), 0, "%s", err);
  cr_expect_eq(t.flow_unmatched + t.unnamed_pids + t.unnamed_tids + t.negative_dur, 0);
  cr_expect_geq(t.last_run, 1);
  expect_no_misnesting(&t);
  mzb_trace_free(&t);
  free(text);
  expect_wellformed(svg);
  char *chart = slurp(svg, &len);
  cr_assert_not_null(chart);
  cr_expect(strstr(chart, ": makespan ") != NULL, "the run's makespan is marked");
  free(chart);
  /* The graph of the measured run, every kernel task placed on a device. */
  char dot[160];
  snprintf(dot, sizeof dot, "%s/pipeline-%s.dot", dir, policy);
  char *g = slurp(dot, &len);
  cr_assert_not_null(g, "no graph at %s", dot);
  cr_expect(strncmp(g, "digraph maize {", 15) == 0, "%s", g);
  unsigned placed = 0;
  for (const char *q = g; (q = strstr(q, ", queue ")) != NULL; q++) placed++;
  cr_expect_eq(placed, 4 * 4 + 2 + 3 + 3, "16 kernel tasks, 2 host tasks, 3 partitions and 3 unpartitions placed:\n%s", g);
  free(g);
  remove(dot);
  remove(json);
  remove(svg);
  rmdir(dir);
}

Test(mzbench, pipeline_trace_follows_perfetto_rules, .timeout = 300) {
  pipeline_and_check("round-robin", NULL); /* every device found (PoCL's, in the test environment) */
}

Test(mzbench, pipeline_trace_cpu_only, .timeout = 300) { pipeline_and_check("eager", "cpu"); }

#if MZB_HAVE_OPENBLAS
void openblas_set_num_threads(int n);
int openblas_get_num_threads(void);

/* The CPU device runs a worker per core: the pipeline calls OpenBLAS with
 * one thread, unless OPENBLAS_NUM_THREADS says how many (a user's choice,
 * which it keeps). */
static int blas_threads_after_pipeline(void) {
  char dir[64];
  tmpdir(dir, sizeof dir);
  mzb_pipeline_opts o = {.devices = "cpu", .policy = "eager", .outdir = dir, .elements = 4096, .tiles = 2,
                         .reps = 1, .quiet = true};
  FILE *devnull = fopen("/dev/null", "w");
  cr_assert_not_null(devnull);
  cr_assert_eq(mzb_pipeline_run(&o, devnull), 0);
  fclose(devnull);
  return openblas_get_num_threads();
}

Test(mzbench, pipeline_calls_openblas_with_one_thread, .timeout = 120) {
  const char *was = getenv("OPENBLAS_NUM_THREADS");
  char *keep = was ? strdup(was) : NULL;
  unsetenv("OPENBLAS_NUM_THREADS");
  openblas_set_num_threads(2);
  cr_expect_eq(blas_threads_after_pipeline(), 1, "the pipeline left OpenBLAS with its own thread count");
  /* Set by the user: left alone. */
  setenv("OPENBLAS_NUM_THREADS", "2", 1);
  openblas_set_num_threads(2);
  int before = openblas_get_num_threads();
  cr_expect_eq(blas_threads_after_pipeline(), before, "the pipeline overrode OPENBLAS_NUM_THREADS");
  if (keep) setenv("OPENBLAS_NUM_THREADS", keep, 1);
  else unsetenv("OPENBLAS_NUM_THREADS");
  free(keep);
}
#endif

Test(mzbench, pipeline_refuses_bad_options) {
  FILE *devnull = fopen("/dev/null", "w");
  cr_assert_not_null(devnull);
  mzb_pipeline_opts o = {.devices = "cpu", .policy = "no-such-policy", .outdir = "/tmp", .elements = 100, .tiles = 2,
                         .quiet = true};
  cr_expect_eq(mzb_pipeline_run(&o, devnull), 1);
  o.policy = NULL;
  o.tiles = 0;
  cr_expect_eq(mzb_pipeline_run(&o, devnull), 1);
  o.tiles = 2;
  o.devices = "nonsense-device";
  cr_expect_eq(mzb_pipeline_run(&o, devnull), 1);
  o.devices = "cpu";
  o.outdir = "/proc/no-such-dir/x";
  cr_expect_eq(mzb_pipeline_run(&o, devnull), 1);
  fclose(devnull);
}

/* heft moves tiles between the CPU and both OpenCL devices, with reads back
 * to the host: the chart's copies must add up to the table's (checked by
 * mzb_pipeline_run itself, which fails otherwise). */
Test(mzbench, pipeline_trace_agrees_with_statistics_under_heft, .timeout = 300) { pipeline_and_check("heft", NULL); }
