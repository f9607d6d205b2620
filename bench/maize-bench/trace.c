/* maize-bench trace: read an MZ_TRACE file (Chrome trace-event JSON, as
 * src/trace.c writes it), print a summary and draw a Gantt chart.
 *
 *   maize-bench trace FILE.json [--svg OUT.svg] [--run N|last|all]
 *
 * The JSON reader here is small but complete for what trace files hold;
 * malformed input gives a message with the line and column and exit 1.
 * pipeline.c and the tests use the same reader (see mzb.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "maize/error.h"
#include "mzb.h"
#include "svg.h"

/* ---- arena ---- */

struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

struct mzb_jdoc {
  struct chunk *chunks;
  mzb_json root;
};

static void *arena_alloc(mzb_jdoc *d, size_t n) {
  n = (n + 15) & ~(size_t)15;
  struct chunk *c = d->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > (1u << 20) ? n : (1u << 20);
    c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->cap = cap;
    c->used = 0;
    c->next = d->chunks;
    d->chunks = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  return p;
}

void mzb_json_free(mzb_jdoc *d) {
  if (!d) return;
  for (struct chunk *c = d->chunks, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(d);
}

const mzb_json *mzb_jdoc_root(const mzb_jdoc *d) { return d ? &d->root : NULL; }

const mzb_json *mzb_json_get(const mzb_json *o, const char *key) {
  if (!o || o->type != MZB_JOBJ) return NULL;
  for (uint32_t i = 0; i < o->n; i++)
    if (!strcmp(o->keys[i], key)) return &o->u.items[i];
  return NULL;
}

/* ---- parser ---- */

#define MAX_DEPTH 256

struct parser {
  const char *s, *end, *p;
  mzb_jdoc *d;
  char *err;
  size_t errcap;
  bool failed;
  /* Scratch stacks for the members of the containers being parsed: a
   * container's members are copied into the arena when it closes. */
  mzb_json *stk;
  const char **kstk;
  size_t nstk, capstk;
  /* String scratch. */
  char *buf;
  size_t nbuf, capbuf;
};

static void fail(struct parser *ps, const char *fmt, ...) {
  if (ps->failed) return;
  ps->failed = true;
  size_t line = 1, col = 1;
  for (const char *q = ps->s; q < ps->p && q < ps->end; q++) {
    if (*q == '\n') line++, col = 1;
    else col++;
  }
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(ps->err, ps->errcap, "line %zu, column %zu: %s", line, col, msg);
}

static void skip_ws(struct parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static bool buf_put(struct parser *ps, char c) {
  if (ps->nbuf == ps->capbuf) {
    size_t cap = ps->capbuf ? ps->capbuf * 2 : 256;
    char *b = realloc(ps->buf, cap);
    if (!b) {
      fail(ps, "out of memory");
      return false;
    }
    ps->buf = b;
    ps->capbuf = cap;
  }
  ps->buf[ps->nbuf++] = c;
  return true;
}

static bool buf_utf8(struct parser *ps, uint32_t cp) {
  if (cp < 0x80) return buf_put(ps, (char)cp);
  if (cp < 0x800) return buf_put(ps, (char)(0xc0 | cp >> 6)) && buf_put(ps, (char)(0x80 | (cp & 0x3f)));
  if (cp < 0x10000)
    return buf_put(ps, (char)(0xe0 | cp >> 12)) && buf_put(ps, (char)(0x80 | ((cp >> 6) & 0x3f))) &&
           buf_put(ps, (char)(0x80 | (cp & 0x3f)));
  return buf_put(ps, (char)(0xf0 | cp >> 18)) && buf_put(ps, (char)(0x80 | ((cp >> 12) & 0x3f))) &&
         buf_put(ps, (char)(0x80 | ((cp >> 6) & 0x3f))) && buf_put(ps, (char)(0x80 | (cp & 0x3f)));
}

static int hex4(struct parser *ps, uint32_t *out) {
  if (ps->end - ps->p < 4) return -1;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char c = ps->p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return -1;
  }
  ps->p += 4;
  *out = v;
  return 0;
}

/* A string at ps->p (the opening quote); returns it in the arena. */
static const char *parse_string(struct parser *ps, uint32_t *len) {
  ps->p++;
  ps->nbuf = 0;
  for (;;) {
    if (ps->p >= ps->end) {
      fail(ps, "unterminated string");
      return NULL;
    }
    unsigned char c = (unsigned char)*ps->p;
    if (c == '"') {
      ps->p++;
      break;
    }
    if (c < 0x20) {
      fail(ps, "control character 0x%02x in a string", c);
      return NULL;
    }
    if (c != '\\') {
      if (!buf_put(ps, (char)c)) return NULL;
      ps->p++;
      continue;
    }
    ps->p++;
    if (ps->p >= ps->end) {
      fail(ps, "unterminated escape");
      return NULL;
    }
    char e = *ps->p++;
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *k = strchr(from, e);
    if (e && k) {
      if (!buf_put(ps, to[k - from])) return NULL;
      continue;
    }
    if (e != 'u') {
      ps->p--;
      fail(ps, "bad escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
      return NULL;
    }
    uint32_t cp;
    if (hex4(ps, &cp)) {
      fail(ps, "bad \\u escape");
      return NULL;
    }
    if (cp >= 0xd800 && cp < 0xdc00) {
      uint32_t lo;
      if (ps->end - ps->p >= 2 && ps->p[0] == '\\' && ps->p[1] == 'u') {
        ps->p += 2;
        if (hex4(ps, &lo) || lo < 0xdc00 || lo > 0xdfff) {
          fail(ps, "bad low surrogate");
          return NULL;
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      } else {
        cp = 0xfffd; /* a lone high surrogate */
      }
    } else if (cp >= 0xdc00 && cp < 0xe000) {
      cp = 0xfffd;
    }
    if (!buf_utf8(ps, cp)) return NULL;
  }
  if (ps->nbuf > UINT32_MAX - 1) {
    fail(ps, "string too long");
    return NULL;
  }
  char *s = arena_alloc(ps->d, ps->nbuf + 1);
  if (!s) {
    fail(ps, "out of memory");
    return NULL;
  }
  if (ps->nbuf) memcpy(s, ps->buf, ps->nbuf);
  s[ps->nbuf] = 0;
  *len = (uint32_t)ps->nbuf;
  return s;
}

static bool push(struct parser *ps, const mzb_json *v, const char *key) {
  if (ps->nstk == ps->capstk) {
    size_t cap = ps->capstk ? ps->capstk * 2 : 64;
    mzb_json *s = realloc(ps->stk, cap * sizeof *s);
    if (s) ps->stk = s;
    const char **k = realloc(ps->kstk, cap * sizeof *k);
    if (k) ps->kstk = k;
    if (!s || !k) {
      fail(ps, "out of memory");
      return false;
    }
    ps->capstk = cap;
  }
  ps->stk[ps->nstk] = *v;
  ps->kstk[ps->nstk] = key;
  ps->nstk++;
  return true;
}

static bool parse_value(struct parser *ps, mzb_json *out, int depth);

static bool parse_container(struct parser *ps, mzb_json *out, int depth, bool obj) {
  if (depth >= MAX_DEPTH) {
    fail(ps, "nesting deeper than %d", MAX_DEPTH);
    return false;
  }
  ps->p++;
  size_t base = ps->nstk;
  skip_ws(ps);
  char close = obj ? '}' : ']';
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
  } else {
    for (;;) {
      const char *key = NULL;
      skip_ws(ps);
      if (obj) {
        uint32_t kl;
        if (ps->p >= ps->end || *ps->p != '"') {
          fail(ps, ps->p >= ps->end ? "unexpected end of input in an object" : "expected a string key");
          return false;
        }
        if (!(key = parse_string(ps, &kl))) return false;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
          fail(ps, "expected ':' after a key");
          return false;
        }
        ps->p++;
      }
      mzb_json v;
      if (!parse_value(ps, &v, depth + 1) || !push(ps, &v, key)) return false;
      skip_ws(ps);
      if (ps->p >= ps->end) {
        fail(ps, "unexpected end of input in an %s", obj ? "object" : "array");
        return false;
      }
      if (*ps->p == ',') {
        ps->p++;
        continue;
      }
      if (*ps->p == close) {
        ps->p++;
        break;
      }
      fail(ps, "expected ',' or '%c'", close);
      return false;
    }
  }
  size_t n = ps->nstk - base;
  if (n > UINT32_MAX) {
    fail(ps, "too many members");
    return false;
  }
  out->type = obj ? MZB_JOBJ : MZB_JARR;
  out->n = (uint32_t)n;
  out->u.items = NULL;
  out->keys = NULL;
  if (n) {
    mzb_json *items = arena_alloc(ps->d, n * sizeof *items);
    const char **keys = obj ? arena_alloc(ps->d, n * sizeof *keys) : NULL;
    if (!items || (obj && !keys)) {
      fail(ps, "out of memory");
      return false;
    }
    memcpy(items, ps->stk + base, n * sizeof *items);
    if (obj) memcpy(keys, ps->kstk + base, n * sizeof *keys);
    out->u.items = items;
    out->keys = keys;
  }
  ps->nstk = base;
  return true;
}

static bool parse_number(struct parser *ps, mzb_json *out) {
  /* Check the JSON grammar, then let strtod convert a bounded copy. */
  const char *q = ps->p;
  if (q < ps->end && *q == '-') q++;
  if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
    fail(ps, "bad number");
    return false;
  }
  if (*q == '0') q++;
  else
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  if (q < ps->end && *q == '.') {
    q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
      fail(ps, "bad number: a digit must follow '.'");
      return false;
    }
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  if (q < ps->end && (*q == 'e' || *q == 'E')) {
    q++;
    if (q < ps->end && (*q == '+' || *q == '-')) q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
      fail(ps, "bad number: a digit must follow the exponent");
      return false;
    }
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  char tmp[128];
  size_t n = (size_t)(q - ps->p);
  if (n >= sizeof tmp) {
    fail(ps, "number too long");
    return false;
  }
  memcpy(tmp, ps->p, n);
  tmp[n] = 0;
  out->type = MZB_JNUM;
  out->n = 0;
  out->keys = NULL;
  out->u.num = strtod(tmp, NULL);
  ps->p = q;
  return true;
}

static bool literal(struct parser *ps, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n)) return false;
  ps->p += n;
  return true;
}

static bool parse_value(struct parser *ps, mzb_json *out, int depth) {
  skip_ws(ps);
  memset(out, 0, sizeof *out);
  if (ps->p >= ps->end) {
    fail(ps, "unexpected end of input");
    return false;
  }
  switch (*ps->p) {
  case '{': return parse_container(ps, out, depth, true);
  case '[': return parse_container(ps, out, depth, false);
  case '"': {
    uint32_t len;
    const char *s = parse_string(ps, &len);
    if (!s) return false;
    out->type = MZB_JSTR;
    out->u.str = s;
    out->n = len;
    return true;
  }
  default:
    if (literal(ps, "true")) {
      out->type = MZB_JBOOL;
      out->u.num = 1;
      return true;
    }
    if (literal(ps, "false")) {
      out->type = MZB_JBOOL;
      return true;
    }
    if (literal(ps, "null")) return true;
    if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps, out);
    {
      unsigned char c = (unsigned char)*ps->p;
      if (c >= 0x20 && c < 0x7f) fail(ps, "unexpected character '%c'", c);
      else fail(ps, "unexpected byte 0x%02x", c);
    }
    return false;
  }
}

mzb_jdoc *mzb_json_parse(const char *text, size_t len, char *err, size_t errcap) {
  char dummy[1];
  if (!err || !errcap) err = dummy, errcap = sizeof dummy;
  err[0] = 0;
  mzb_jdoc *d = calloc(1, sizeof *d);
  if (!d || !text) {
    snprintf(err, errcap, "%s", d ? "no input" : "out of memory");
    free(d);
    return NULL;
  }
  struct parser ps = {.s = text, .end = text + len, .p = text, .d = d, .err = err, .errcap = errcap};
  bool ok = parse_value(&ps, &d->root, 0);
  if (ok) {
    skip_ws(&ps);
    if (ps.p != ps.end) {
      fail(&ps, "unexpected data after the JSON value");
      ok = false;
    }
  }
  free(ps.stk);
  free(ps.kstk);
  free(ps.buf);
  if (!ok) {
    mzb_json_free(d);
    return NULL;
  }
  return d;
}

/* ---- traces ---- */

static void errf(char *err, size_t cap, const char *fmt, ...) {
  if (!err || !cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
}

static bool get_num(const mzb_json *ev, const char *key, double *out) {
  const mzb_json *v = mzb_json_get(ev, key);
  if (!v || v->type != MZB_JNUM) return false;
  *out = v->u.num;
  return true;
}

static bool get_id(const mzb_json *ev, const char *key, unsigned *out) {
  double v;
  if (!get_num(ev, key, &v) || !(v >= 0) || v > 4294967295.0 || v != floor(v)) return false;
  *out = (unsigned)v;
  return true;
}

static const char *get_str(const mzb_json *ev, const char *key) {
  const mzb_json *v = mzb_json_get(ev, key);
  return v && v->type == MZB_JSTR ? v->u.str : NULL;
}

struct name_ent {
  unsigned pid, tid;
  bool thread;
  const char *name;
};

struct flow_ent {
  char key[96]; /* cat, name and id */
  int phase;    /* 0 start, 1 finish */
};

static int cmp_flow(const void *a, const void *b) {
  const struct flow_ent *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : x->phase - y->phase;
}

static int cmp_track(const void *a, const void *b) {
  const mzb_track *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  return (x->tid > y->tid) - (x->tid < y->tid);
}

static const char *find_name(const struct name_ent *v, size_t n, unsigned pid, unsigned tid, bool thread) {
  for (size_t i = n; i-- > 0;) /* the last "M" event wins, as in Perfetto */
    if (v[i].thread == thread && v[i].pid == pid && (!thread || v[i].tid == tid)) return v[i].name;
  return NULL;
}

void mzb_trace_free(mzb_trace *t) {
  if (!t) return;
  mzb_json_free(t->doc);
  free(t->slices);
  if (t->tracks)
    for (size_t i = 0; i < t->ntracks; i++) free((char *)t->tracks[i].name);
  free(t->tracks);
  memset(t, 0, sizeof *t);
}

int mzb_trace_parse(const char *text, size_t len, mzb_trace *t, char *err, size_t errcap) {
  memset(t, 0, sizeof *t);
  t->last_run = -1;
  char jerr[300];
  t->doc = mzb_json_parse(text, len, jerr, sizeof jerr);
  if (!t->doc) {
    errf(err, errcap, "malformed JSON: %s", jerr);
    return 1;
  }
  const mzb_json *root = mzb_jdoc_root(t->doc), *evs = root;
  if (root->type == MZB_JOBJ) {
    evs = mzb_json_get(root, "traceEvents");
    if (!evs || evs->type != MZB_JARR) {
      errf(err, errcap, "not a trace: the top-level object has no \"traceEvents\" array");
      mzb_trace_free(t);
      return 1;
    }
  } else if (root->type != MZB_JARR) {
    errf(err, errcap, "not a trace: the top level is neither an object nor an array");
    mzb_trace_free(t);
    return 1;
  }
  struct name_ent *names = NULL;
  struct flow_ent *flows = NULL;
  size_t nnames = 0, nflows = 0;
  int rc = 1;
  t->slices = malloc((evs->n ? evs->n : 1) * sizeof *t->slices);
  names = malloc((evs->n ? evs->n : 1) * sizeof *names);
  flows = malloc((evs->n ? evs->n : 1) * sizeof *flows);
  if (!t->slices || !names || !flows) {
    errf(err, errcap, "out of memory");
    goto out;
  }
  for (uint32_t i = 0; i < evs->n; i++) {
    const mzb_json *ev = &evs->u.items[i];
    if (ev->type != MZB_JOBJ) {
      errf(err, errcap, "event %u is not an object", i);
      goto out;
    }
    const char *ph = get_str(ev, "ph");
    if (!ph) {
      errf(err, errcap, "event %u has no \"ph\" string", i);
      goto out;
    }
    if (!strcmp(ph, "X")) {
      mzb_slice s = {.run = -1, .cat = ""};
      const char *miss = !get_num(ev, "ts", &s.ts)   ? "ts"
                         : !get_num(ev, "dur", &s.dur) ? "dur"
                         : !get_id(ev, "pid", &s.pid)  ? "pid"
                         : !get_id(ev, "tid", &s.tid)  ? "tid"
                         : !(s.name = get_str(ev, "name")) ? "name"
                                                           : NULL;
      if (miss) {
        errf(err, errcap, "event %u (\"X\") lacks a valid \"%s\"", i, miss);
        goto out;
      }
      if (!isfinite(s.ts) || !isfinite(s.dur)) {
        errf(err, errcap, "event %u (\"X\") has a non-finite time", i);
        goto out;
      }
      if (s.dur < 0) t->negative_dur++;
      const char *cat = get_str(ev, "cat");
      if (cat) s.cat = cat;
      s.transfer = !strcmp(s.cat, "transfer");
      const mzb_json *args = mzb_json_get(ev, "args");
      double v;
      if (get_num(args, "bytes", &v) && v >= 0 && v < 1.8e19) s.bytes = (uint64_t)v;
      if (get_num(args, "run", &v) && v >= 0 && v < 9e18) s.run = (int64_t)v;
      if (s.run > t->last_run) t->last_run = s.run;
      s.planned = get_num(args, "planned_ts", &s.planned_ts) && get_num(args, "planned_dur", &s.planned_dur) &&
                  isfinite(s.planned_ts) && isfinite(s.planned_dur);
      t->slices[t->nslices++] = s;
    } else if (!strcmp(ph, "M")) {
      const char *nm = get_str(ev, "name"), *val = get_str(mzb_json_get(ev, "args"), "name");
      struct name_ent ne = {.name = val};
      if (!nm || !val || !get_id(ev, "pid", &ne.pid)) continue; /* other metadata */
      if (!strcmp(nm, "process_name")) {
        names[nnames++] = ne;
      } else if (!strcmp(nm, "thread_name")) {
        if (!get_id(ev, "tid", &ne.tid)) {
          errf(err, errcap, "event %u (thread_name) lacks a valid \"tid\"", i);
          goto out;
        }
        ne.thread = true;
        names[nnames++] = ne;
      }
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
      const mzb_json *id = mzb_json_get(ev, "id");
      const char *cat = get_str(ev, "cat"), *nm = get_str(ev, "name");
      struct flow_ent fe = {.phase = ph[0] == 'f'};
      if (!id || (id->type != MZB_JNUM && id->type != MZB_JSTR)) {
        errf(err, errcap, "event %u (flow \"%s\") lacks an \"id\"", i, ph);
        goto out;
      }
      /* Perfetto binds a start to a finish by (cat, name, id). */
      if (id->type == MZB_JNUM) snprintf(fe.key, sizeof fe.key, "%.40s\x1f%.20s\x1f%.17g", cat ? cat : "", nm ? nm : "", id->u.num);
      else snprintf(fe.key, sizeof fe.key, "%.30s\x1f%.20s\x1f\"%.40s", cat ? cat : "", nm ? nm : "", id->u.str);
      if (!fe.phase) t->flow_starts++;
      flows[nflows++] = fe;
    } else {
      t->ignored++;
    }
  }
  /* Flows: each start needs a finish of the same key, and the reverse. */
  if (nflows) qsort(flows, nflows, sizeof *flows, cmp_flow);
  for (size_t i = 0; i < nflows;) {
    size_t j = i, s = 0, f = 0;
    for (; j < nflows && !strcmp(flows[j].key, flows[i].key); j++) {
      if (flows[j].phase) f++;
      else s++;
    }
    t->flow_unmatched += s > f ? s - f : f - s;
    i = j;
  }
  /* Tracks: every (pid, tid) an X uses or a thread_name names (an idle
   * queue is worth a row), named "process / thread". */
  size_t cand = t->nslices + nnames;
  t->tracks = calloc(cand ? cand : 1, sizeof *t->tracks);
  if (!t->tracks) {
    errf(err, errcap, "out of memory");
    goto out;
  }
  size_t nt = 0;
  for (size_t i = 0; i < t->nslices; i++) t->tracks[nt++] = (mzb_track){.pid = t->slices[i].pid, .tid = t->slices[i].tid};
  for (size_t i = 0; i < nnames; i++)
    if (names[i].thread) t->tracks[nt++] = (mzb_track){.pid = names[i].pid, .tid = names[i].tid};
  if (nt) qsort(t->tracks, nt, sizeof *t->tracks, cmp_track);
  size_t m = 0;
  for (size_t i = 0; i < nt; i++)
    if (!m || cmp_track(&t->tracks[m - 1], &t->tracks[i])) t->tracks[m++] = t->tracks[i];
  nt = t->ntracks = m;
  /* Unnamed: only processes and threads that X events use. */
  for (size_t i = 0; i < t->nslices; i++) {
    const mzb_slice *s = &t->slices[i];
    if (!find_name(names, nnames, s->pid, s->tid, true)) t->unnamed_tids++;
    if (!find_name(names, nnames, s->pid, 0, false)) t->unnamed_pids++;
  }
  for (size_t i = 0; i < nt; i++) {
    const char *pn = find_name(names, nnames, t->tracks[i].pid, 0, false);
    const char *tn = find_name(names, nnames, t->tracks[i].pid, t->tracks[i].tid, true);
    char buf[512];
    char pbuf[32], tbuf[32];
    snprintf(pbuf, sizeof pbuf, "pid %u", t->tracks[i].pid);
    snprintf(tbuf, sizeof tbuf, "tid %u", t->tracks[i].tid);
    /* maize names devices "<kind> <index>: <model>": the rows show the
     * part before ": ", the summary lists the full names once. */
    const char *cut = pn ? strstr(pn, ": ") : NULL;
    int pl = pn ? (cut ? (int)(cut - pn) : (int)strlen(pn)) : (int)strlen(pbuf);
    snprintf(buf, sizeof buf, "%.*s / %s", pl, pn ? pn : pbuf, tn ? tn : tbuf);
    t->tracks[i].process = pn;
    t->tracks[i].name = strdup(buf);
    if (!t->tracks[i].name) {
      t->ntracks = i;
      errf(err, errcap, "out of memory");
      goto out;
    }
  }
  rc = 0;
out:
  free(names);
  free(flows);
  if (rc) mzb_trace_free(t);
  return rc;
}

int mzb_trace_load(const char *path, mzb_trace *t, char *err, size_t errcap) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "rb");
  if (!f) {
    errf(err, errcap, "cannot open '%s': %s", path, strerror(errno));
    return 1;
  }
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (cap - len < 65536) {
      size_t nc = cap ? cap * 2 : 1 << 20;
      char *nt = realloc(text, nc);
      if (!nt) {
        free(text);
        fclose(f);
        errf(err, errcap, "'%s': out of memory", path);
        return 1;
      }
      text = nt;
      cap = nc;
    }
    size_t r = fread(text + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(text);
    errf(err, errcap, "cannot read '%s'", path);
    return 1;
  }
  char e[400];
  int rc = mzb_trace_parse(text, len, t, e, sizeof e);
  free(text);
  if (rc) errf(err, errcap, "%s: %s", path, e);
  return rc;
}

static size_t track_of(const mzb_trace *t, unsigned pid, unsigned tid) {
  size_t lo = 0, hi = t->ntracks;
  mzb_track key = {.pid = pid, .tid = tid};
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cmp_track(&t->tracks[mid], &key) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool in_run(const mzb_slice *s, int64_t run) { return run < 0 || s->run == run; }

static void fmt_dur_us(char *buf, size_t cap, double us) {
  if (us >= 1000) snprintf(buf, cap, "%.2f ms", us / 1e3);
  else snprintf(buf, cap, "%.1f \xc2\xb5s", us);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

size_t mzb_trace_runs(const mzb_trace *t, int64_t run, mzb_trace_run *out, size_t cap) {
  int64_t *ids = malloc((t->nslices ? t->nslices : 1) * sizeof *ids);
  if (!ids) return 0;
  size_t n = 0, m = 0;
  for (size_t i = 0; i < t->nslices; i++)
    if (t->slices[i].run >= 0 && in_run(&t->slices[i], run)) ids[n++] = t->slices[i].run;
  if (n) qsort(ids, n, sizeof *ids, cmp_i64);
  for (size_t i = 0; i < n; i++)
    if (!m || ids[m - 1] != ids[i]) ids[m++] = ids[i];
  for (size_t k = 0; k < m && k < cap; k++) out[k] = (mzb_trace_run){.run = ids[k], .t0 = INFINITY, .t1 = -INFINITY};
  for (size_t i = 0; i < t->nslices; i++) {
    const mzb_slice *s = &t->slices[i];
    if (s->run < 0 || !in_run(s, run)) continue;
    int64_t *hit = bsearch(&s->run, ids, m, sizeof *ids, cmp_i64);
    size_t k = (size_t)(hit - ids);
    if (k >= cap) continue;
    out[k].t0 = fmin(out[k].t0, s->ts);
    out[k].t1 = fmax(out[k].t1, s->ts + (s->dur > 0 ? s->dur : 0));
  }
  free(ids);
  return m;
}

int mzb_trace_svg(const mzb_trace *t, int64_t run, const char *title, const char *svg_path) {
  mzb_gantt_op *ops = malloc((t->nslices ? t->nslices : 1) * sizeof *ops);
  const char **rows = malloc((t->ntracks ? t->ntracks : 1) * sizeof *rows);
  char (*labels)[160] = malloc((t->nslices ? t->nslices : 1) * sizeof *labels);
  /* At most one run per slice. */
  mzb_trace_run *runs = malloc((t->nslices ? t->nslices : 1) * sizeof *runs);
  mzb_gantt_span *spans = malloc((t->nslices ? t->nslices : 1) * sizeof *spans);
  char (*slabels)[96] = malloc((t->nslices ? t->nslices : 1) * sizeof *slabels);
  int rc = MZ_ENOMEM;
  if (ops && rows && labels && runs && spans && slabels) {
    size_t n = 0;
    for (size_t i = 0; i < t->ntracks; i++) rows[i] = t->tracks[i].name;
    for (size_t i = 0; i < t->nslices; i++) {
      const mzb_slice *s = &t->slices[i];
      if (!in_run(s, run) || s->dur < 0) continue;
      double a = s->ts * 1000.0, b = (s->ts + s->dur) * 1000.0;
      if (a < 0) a = 0;
      if (b < a) b = a;
      if (s->bytes) snprintf(labels[n], sizeof labels[n], "%.100s, %llu bytes", s->name, (unsigned long long)s->bytes);
      else if (s->run >= 0) snprintf(labels[n], sizeof labels[n], "%.120s (run %lld)", s->name, (long long)s->run);
      else snprintf(labels[n], sizeof labels[n], "%.120s", s->name);
      ops[n] = (mzb_gantt_op){.t0 = (uint64_t)a, .t1 = (uint64_t)b, .row = (unsigned)track_of(t, s->pid, s->tid),
                              .kind = s->name, .label = labels[n], .is_transfer = s->transfer};
      n++;
    }
    /* Each run's extent, marked with its makespan (first start to last
     * end of its slices, as mz_run_stats.elapsed_ns nearly is). */
    size_t nr = mzb_trace_runs(t, run, runs, t->nslices);
    for (size_t k = 0; k < nr; k++) {
      char d[48];
      fmt_dur_us(d, sizeof d, runs[k].t1 - runs[k].t0);
      snprintf(slabels[k], sizeof slabels[k], "run %lld: makespan %s", (long long)runs[k].run, d);
      double a = runs[k].t0 > 0 ? runs[k].t0 * 1000.0 : 0, b = runs[k].t1 * 1000.0;
      spans[k] = (mzb_gantt_span){.t0 = (uint64_t)a, .t1 = (uint64_t)(b > a ? b : a), .label = slabels[k]};
    }
    rc = mzb_svg_gantt(svg_path, title, rows, t->ntracks, ops, n, spans, nr);
  }
  free(ops);
  free(rows);
  free(labels);
  free(runs);
  free(spans);
  free(slabels);
  return rc;
}

struct kstat {
  const char *name;
  double total;
  size_t count;
};

/* The policy's plan against what ran, per kernel and device: planned and
 * real mean durations, the mean error of the duration, and how late nodes
 * started against the plan.  Slices without a plan are left out. */
struct pstat {
  const char *name;
  unsigned pid;
  size_t count;
  double planned, real, abserr, late, late_max;
};

static int cmp_pstat(const void *a, const void *b) {
  const struct pstat *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->pid > y->pid) - (x->pid < y->pid);
}

static void plan_summary(const mzb_trace *t, int64_t run, FILE *out) {
  size_t n = 0;
  for (size_t i = 0; i < t->nslices; i++) n += in_run(&t->slices[i], run) && t->slices[i].planned;
  if (!n) return;
  struct pstat *v = calloc(n, sizeof *v);
  if (!v) return;
  size_t k = 0;
  double pend = -INFINITY, rend = -INFINITY, t0 = INFINITY;
  for (size_t i = 0; i < t->nslices; i++) {
    const mzb_slice *s = &t->slices[i];
    if (!in_run(s, run) || !s->planned) continue;
    double late = s->ts - s->planned_ts;
    v[k++] = (struct pstat){.name = s->name, .pid = s->pid, .count = 1, .planned = s->planned_dur, .real = s->dur,
                            .abserr = fabs(s->dur - s->planned_dur), .late = late, .late_max = late};
    pend = fmax(pend, s->planned_ts + s->planned_dur);
    rend = fmax(rend, s->ts + s->dur);
    t0 = fmin(t0, fmin(s->ts, s->planned_ts));
  }
  if (k) qsort(v, k, sizeof *v, cmp_pstat);
  size_t m = 0;
  for (size_t i = 0; i < k; i++) {
    if (m && !strcmp(v[m - 1].name, v[i].name) && v[m - 1].pid == v[i].pid) {
      struct pstat *a = &v[m - 1];
      a->count++;
      a->planned += v[i].planned;
      a->real += v[i].real;
      a->abserr += v[i].abserr;
      a->late += v[i].late;
      a->late_max = fmax(a->late_max, v[i].late_max);
    } else {
      v[m++] = v[i];
    }
  }
  fprintf(out, "\nplan against what ran (%zu planned nodes; planned end %.3f ms, real end %.3f ms, from the first)\n", n,
          (pend - t0) / 1e3, (rend - t0) / 1e3);
  fprintf(out, "%-20s %-8s %6s %12s %12s %10s %12s %12s\n", "kernel", "device", "count", "planned us", "real us",
          "error", "late us", "late max us");
  for (size_t i = 0; i < m; i++) {
    const struct pstat *a = &v[i];
    double c = (double)a->count;
    fprintf(out, "%-20.20s %-8u %6zu %12.2f %12.2f %9.1f%% %12.2f %12.2f\n", a->name, a->pid, a->count,
            a->planned / c, a->real / c, a->real > 0 ? 100.0 * a->abserr / a->real : 0, a->late / c, a->late_max);
  }
  free(v);
}

static int cmp_kstat(const void *a, const void *b) {
  const struct kstat *x = a, *y = b;
  if (x->total != y->total) return x->total > y->total ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_kname(const void *a, const void *b) {
  return strcmp(((const struct kstat *)a)->name, ((const struct kstat *)b)->name);
}

/* A track of copies only: a device's "copy engine" or "host reads". */
static bool copy_track(const mzb_track *k) {
  size_t n = k->name ? strlen(k->name) : 0;
  return (n >= 12 && !strcmp(k->name + n - 12, " copy engine")) || (n >= 11 && !strcmp(k->name + n - 11, " host reads"));
}

void mzb_trace_summary(const mzb_trace *t, int64_t run, FILE *out) {
  double t0 = INFINITY, t1 = -INFINITY;
  size_t n = 0, nxfer = 0;
  uint64_t xbytes = 0;
  for (size_t i = 0; i < t->nslices; i++) {
    const mzb_slice *s = &t->slices[i];
    if (!in_run(s, run)) continue;
    n++;
    t0 = fmin(t0, s->ts);
    t1 = fmax(t1, s->ts + s->dur);
    if (s->transfer) nxfer++, xbytes += s->bytes;
  }
  if (!n) {
    fprintf(out, "no slices%s\n", run >= 0 ? " in this run" : "");
    return;
  }
  double span = t1 - t0;
  fprintf(out, "%zu slices on %zu queue(s)%s; makespan %.3f ms\n", n, t->ntracks, run >= 0 ? " (one run)" : "",
          span / 1e3);
  for (size_t r = 0; r < t->ntracks; r++)
    if (t->tracks[r].process && (!r || t->tracks[r - 1].pid != t->tracks[r].pid))
      fprintf(out, "  device %u: %s\n", t->tracks[r].pid, t->tracks[r].process);
  /* Per queue, and per device (a process) as the sum of its queues. */
  double *busy = calloc(t->ntracks ? t->ntracks : 1, sizeof *busy);
  size_t *ops = calloc(t->ntracks ? t->ntracks : 1, sizeof *ops);
  struct kstat *ks = calloc(n, sizeof *ks);
  if (busy && ops && ks) {
    size_t nk = 0;
    /* A device's copy engine and host reads tracks hold copies only: their
     * rows count copies, and the device total is over its queues alone. */
    for (size_t i = 0; i < t->nslices; i++) {
      const mzb_slice *s = &t->slices[i];
      if (!in_run(s, run)) continue;
      size_t r = track_of(t, s->pid, s->tid);
      if (s->transfer != copy_track(&t->tracks[r])) continue;
      busy[r] += s->dur > 0 ? s->dur : 0;
      ops[r]++;
      if (!s->transfer) ks[nk++] = (struct kstat){.name = s->name, .total = s->dur > 0 ? s->dur : 0, .count = 1};
    }
    fprintf(out, "\n%-44s %6s %12s %6s\n", "device / queue", "ops", "busy ms", "util");
    for (size_t r = 0; r < t->ntracks;) {
      size_t e = r, nq = 0;
      double db = 0;
      size_t dops = 0;
      for (; e < t->ntracks && t->tracks[e].pid == t->tracks[r].pid; e++)
        if (!copy_track(&t->tracks[e])) db += busy[e], dops += ops[e], nq++;
      for (size_t q = r; q < e; q++)
        fprintf(out, "%-44.44s %6zu %12.3f %5.1f%%%s\n", t->tracks[q].name, ops[q], busy[q] / 1e3,
                span > 0 ? 100.0 * busy[q] / span : 0, copy_track(&t->tracks[q]) ? "  (copies)" : "");
      fprintf(out, "%-44s %6zu %12.3f %5.1f%%  (device, %zu queue(s))\n", "  = device total", dops, db / 1e3,
              span > 0 && nq ? 100.0 * db / (span * (double)nq) : 0, nq);
      r = e;
    }
    /* Kernels by total time. */
    if (nk) qsort(ks, nk, sizeof *ks, cmp_kname);
    size_t m = 0;
    for (size_t i = 0; i < nk; i++) {
      if (m && !strcmp(ks[m - 1].name, ks[i].name)) {
        ks[m - 1].total += ks[i].total;
        ks[m - 1].count++;
      } else {
        ks[m++] = ks[i];
      }
    }
    if (m) qsort(ks, m, sizeof *ks, cmp_kstat);
    fprintf(out, "\n%-32s %8s %12s %12s\n", "top kernels", "count", "total ms", "mean us");
    for (size_t i = 0; i < m && i < 10; i++)
      fprintf(out, "%-32.32s %8zu %12.3f %12.2f\n", ks[i].name, ks[i].count, ks[i].total / 1e3,
              ks[i].total / (double)ks[i].count);
  }
  free(busy);
  free(ops);
  free(ks);
  plan_summary(t, run, out);
  if (nxfer)
    fprintf(out, "\ntransfers: %zu, %.3f MB\n", nxfer, (double)xbytes / 1e6);
  else
    fprintf(out, "\ntransfers: none in the trace\n");
  if (t->negative_dur || t->flow_unmatched || t->unnamed_pids || t->unnamed_tids)
    fprintf(out, "warnings: %zu negative durations, %zu unmatched flow events, %zu unnamed processes, %zu unnamed threads\n",
            t->negative_dur, t->flow_unmatched, t->unnamed_pids, t->unnamed_tids);
}

/* ---- the command ---- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: maize-bench trace FILE.json [--svg OUT.svg] [--run N|last|all]\n"
          "  Reads an MZ_TRACE file, prints a summary and writes a Gantt chart,\n"
          "  each run's extent and makespan marked (default: FILE.gantt.svg,\n"
          "  FILE's .json dropped).  --run picks one run (args.run) of a trace\n"
          "  that holds several; default all.\n");
}

/* getopt_long: "--svg OUT" and "--svg=OUT" both work; one positional
 * argument, the trace file. */
int mzb_trace_main(int argc, char **argv) {
  const char *in = NULL, *svg = NULL, *runs = "all";
  static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                           {"svg", required_argument, NULL, 's'},
                                           {"run", required_argument, NULL, 'r'},
                                           {NULL, 0, NULL, 0}};
  int c;
  optind = 0; /* glibc: 0 re-initialises getopt fully */
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return 0;
    case 's':
      if (!*optarg) {
        fprintf(stderr, "maize-bench trace: empty --svg path\n");
        return 2;
      }
      svg = optarg;
      break;
    case 'r': runs = optarg; break;
    case ':':
      fprintf(stderr, "maize-bench trace: %s needs a value\n", argv[optind - 1]);
      usage(stderr);
      return 2;
    default:
      fprintf(stderr, "maize-bench trace: unknown option '%s'\n", argv[optind - 1]);
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc) in = argv[optind++];
  if (optind < argc) {
    fprintf(stderr, "maize-bench trace: one trace file only ('%s' is extra)\n", argv[optind]);
    return 2;
  }
  if (!in) {
    fprintf(stderr, "maize-bench trace: which trace file?\n");
    usage(stderr);
    return 2;
  }
  /* The run: checked as text before the file is read, and against the
   * runs the trace holds after. */
  int64_t run = -1;
  bool last = !strcmp(runs, "last");
  if (!last && strcmp(runs, "all")) {
    char *end;
    errno = 0;
    long long v = strtoll(runs, &end, 10);
    if (errno || end == runs || *end || v < 0) {
      fprintf(stderr, "maize-bench trace: --run wants a run number, 'last' or 'all', not '%s'\n", runs);
      return 2;
    }
    run = v;
  }
  char err[600];
  mzb_trace t;
  if (mzb_trace_load(in, &t, err, sizeof err)) {
    fprintf(stderr, "maize-bench trace: %s\n", err);
    return 1;
  }
  if (last) run = t.last_run; /* -1 (all) when the trace names no run */
  mzb_trace_run one;
  if (run >= 0 && mzb_trace_runs(&t, run, &one, 1) == 0) {
    fprintf(stderr, "maize-bench trace: %s holds no run %lld (runs up to %lld)\n", in, (long long)run,
            (long long)t.last_run);
    mzb_trace_free(&t);
    return 2;
  }
  /* The chart's default name is FILE.gantt.svg (FILE's .json dropped),
   * never FILE.svg: maize-bench pipeline writes its own chart there. */
  char def[4096];
  if (!svg) {
    size_t l = strlen(in);
    if (l > 5 && !strcmp(in + l - 5, ".json")) l -= 5;
    if (l + sizeof ".gantt.svg" > sizeof def) {
      fprintf(stderr, "maize-bench trace: path too long\n");
      mzb_trace_free(&t);
      return 1;
    }
    memcpy(def, in, l);
    strcpy(def + l, ".gantt.svg");
    svg = def;
  }
  /* The title says what is drawn; the file's name without its folders. */
  const char *base = strrchr(in, '/') ? strrchr(in, '/') + 1 : in;
  size_t nruns = mzb_trace_runs(&t, -1, &one, 1);
  unsigned ndev = 0;
  for (size_t r = 0; r < t.ntracks; r++) ndev += !r || t.tracks[r - 1].pid != t.tracks[r].pid;
  char title[512];
  if (run >= 0)
    snprintf(title, sizeof title, "maize trace %.200s: run %lld of %zu, %u device(s), %zu queue(s)", base,
             (long long)run, nruns, ndev, t.ntracks);
  else
    snprintf(title, sizeof title, "maize trace %.200s: %zu run(s), %u device(s), %zu queue(s)", base, nruns, ndev,
             t.ntracks);
  printf("trace %s\n", in);
  mzb_trace_summary(&t, run, stdout);
  int rc = mzb_trace_svg(&t, run, title, svg);
  if (rc) {
    fprintf(stderr, "maize-bench trace: cannot write '%s': %s\n", svg, mz_strerror(rc));
    mzb_trace_free(&t);
    return 1;
  }
  printf("Gantt chart: %s\n", svg);
  mzb_trace_free(&t);
  return 0;
}
