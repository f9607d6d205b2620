/* Kernels: the descriptor, its parameter-list parser, and per-device
 * preparation (build once, cache). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "handle.h"
#include "objects/mz_kernel.h"
#include "objects/mz_runtime.h"

static const char *skip_ws(const char *s) {
  while (*s && isspace((unsigned char)*s)) s++;
  return s;
}

/* Read an identifier into out; returns the rest or NULL. */
static const char *read_word(const char *s, char *out, size_t cap) {
  s = skip_ws(s);
  size_t n = 0;
  while (*s && (isalnum((unsigned char)*s) || *s == '_')) {
    if (n + 1 >= cap) return NULL;
    out[n++] = *s++;
  }
  out[n] = 0;
  return n ? s : NULL;
}

static int dtype_from(const char *w) {
  for (int t = 0; t < MZ_DTYPE_COUNT; t++)
    if (!strcmp(w, mz_dtype_name((mz_dtype)t))) return t;
  return -1;
}

/* Resolve a reference (a name or an index) after all names are known. */
static int resolve_ref(struct mz__param *ps, unsigned n, const char *ref) {
  char *end;
  long v = strtol(ref, &end, 10);
  if (*ref && !*end) return (v >= 0 && (unsigned long)v < n) ? (int)v : -1;
  for (unsigned i = 0; i < n; i++)
    if (!strcmp(ps[i].name, ref)) return (int)i;
  return -1;
}

/* Parse "[dir] type[] name [= fn(ref)]" items.  On error, writes a message
 * naming the parameter and returns MZ_EINVAL. */
static int parse_params(const char *text, struct mz__param **out, unsigned *nout, char *err, size_t errlen) {
  unsigned cap = 8, n = 0;
  struct mz__param *ps = calloc(cap, sizeof *ps);
  char (*refs)[32] = calloc(cap, sizeof *refs);
  if (!ps || !refs) {
    free(ps);
    free(refs);
    return MZ_ENOMEM;
  }
  const char *s = text;
  int rc = MZ_OK;
  while (*(s = skip_ws(s))) {
    if (n == MZ__TASK_MAX_PARAMS) {
      snprintf(err, errlen, "more than %u parameters; a kernel takes at most %u", n, n);
      rc = MZ_ERANGE;
      break;
    }
    if (n == cap) {
      cap *= 2;
      struct mz__param *np = realloc(ps, cap * sizeof *ps);
      char(*nr)[32] = np ? realloc(refs, cap * sizeof *refs) : NULL;
      if (!np || !nr) {
        free(np ? np : ps);
        free(nr ? (void *)nr : (void *)refs);
        return MZ_ENOMEM;
      }
      ps = np;
      refs = nr;
    }
    struct mz__param *p = &ps[n];
    memset(p, 0, sizeof *p);
    refs[n][0] = 0;
    p->ref = -1;
    char w[32];
    const char *r = read_word(s, w, sizeof w);
    if (!r) {
      snprintf(err, errlen, "parameter %u: expected a type or direction at '%.20s'", n, s);
      rc = MZ_EINVAL;
      break;
    }
    int dir = -1;
    if (!strcmp(w, "in")) dir = MZ__IN;
    else if (!strcmp(w, "out")) dir = MZ__OUT;
    else if (!strcmp(w, "inout")) dir = MZ__INOUT;
    else if (!strcmp(w, "outlike")) dir = MZ__OUTLIKE;
    if (dir == MZ__OUTLIKE) {
      r = skip_ws(r);
      if (*r != '(' || !(r = read_word(r + 1, refs[n], sizeof refs[n])) || *(r = skip_ws(r)) != ')') {
        snprintf(err, errlen, "parameter %u: outlike needs '(name or index)'", n);
        rc = MZ_EINVAL;
        break;
      }
      r++;
    }
    if (dir >= 0) {
      s = r;
      if (!(r = read_word(s, w, sizeof w))) {
        snprintf(err, errlen, "parameter %u: expected a type after the direction", n);
        rc = MZ_EINVAL;
        break;
      }
    }
    int t = dtype_from(w);
    if (t < 0) {
      snprintf(err, errlen, "parameter %u: unknown type '%s'", n, w);
      rc = MZ_EINVAL;
      break;
    }
    p->dtype = (mz_dtype)t;
    s = skip_ws(r);
    bool is_buf = false;
    if (*s == '[') {
      /* "[]" any 1 to 3 dims, "[1]" to "[3]" exactly that many; anything
       * else between the brackets is an error (it was skipped). */
      is_buf = true;
      s = skip_ws(s + 1);
      if (*s >= '1' && *s <= '3') p->ndim = (unsigned char)(*s++ - '0');
      s = skip_ws(s);
      if (*s != ']') {
        snprintf(err, errlen, "parameter %u: expected '[]' or '[1]' to '[3]' (dims) after '%s', found '%.20s'", n, w, s);
        rc = MZ_EINVAL;
        break;
      }
      s++;
    }
    if (is_buf && dir < 0) {
      snprintf(err, errlen, "parameter %u: a buffer needs a direction (in, out, inout, outlike)", n);
      rc = MZ_EINVAL;
      break;
    }
    if (!is_buf && dir >= 0) {
      snprintf(err, errlen, "parameter %u: direction '%s' needs a buffer type such as %s[]", n,
               dir == MZ__OUTLIKE ? "outlike" : "in/out", w);
      rc = MZ_EINVAL;
      break;
    }
    if (!(r = read_word(s, p->name, sizeof p->name))) {
      snprintf(err, errlen, "parameter %u: expected a name", n);
      rc = MZ_EINVAL;
      break;
    }
    s = skip_ws(r);
    p->dir = dir >= 0 ? (enum mz__dir)dir : MZ__SCALAR;
    if (*s == '=') {
      if (is_buf) {
        snprintf(err, errlen, "parameter '%s': a buffer cannot be computed", p->name);
        rc = MZ_EINVAL;
        break;
      }
      char fn[32];
      r = read_word(s + 1, fn, sizeof fn);
      if (r) r = skip_ws(r);
      if (!r || *r != '(' || !(r = read_word(r + 1, refs[n], sizeof refs[n])) || *(r = skip_ws(r)) != ')') {
        snprintf(err, errlen, "parameter '%s': expected sizeof(ref), widthof(ref) or heightof(ref)", p->name);
        rc = MZ_EINVAL;
        break;
      }
      if (!strcmp(fn, "sizeof")) p->dir = MZ__SIZEOF;
      else if (!strcmp(fn, "widthof")) p->dir = MZ__WIDTHOF;
      else if (!strcmp(fn, "heightof")) p->dir = MZ__HEIGHTOF;
      else {
        snprintf(err, errlen, "parameter '%s': unknown function '%s'", p->name, fn);
        rc = MZ_EINVAL;
        break;
      }
      s = r + 1;
    }
    s = skip_ws(s);
    n++;
    if (*s == ',') {
      s = skip_ws(s + 1);
      if (!*s) {
        snprintf(err, errlen, "parameter '%s': a ',' with no parameter after it", p->name);
        rc = MZ_EINVAL;
        break;
      }
    } else if (*s) {
      snprintf(err, errlen, "parameter '%s': expected ',' at '%.20s'", p->name, s);
      rc = MZ_EINVAL;
      break;
    }
  }
  if (rc == MZ_OK && n == 0) {
    snprintf(err, errlen, "the parameter list is empty");
    rc = MZ_EINVAL;
  }
  for (unsigned i = 0; rc == MZ_OK && i < n; i++) {
    for (unsigned j = 0; j < i; j++)
      if (!strcmp(ps[i].name, ps[j].name)) {
        snprintf(err, errlen, "parameter '%s' is named twice", ps[i].name);
        rc = MZ_EINVAL;
      }
    if (rc == MZ_OK && refs[i][0]) {
      int ref = resolve_ref(ps, n, refs[i]);
      if (ref < 0 || ps[ref].dir == MZ__SCALAR || ps[ref].dir >= MZ__SIZEOF || (unsigned)ref == i) {
        snprintf(err, errlen, "parameter '%s': '%s' is not another buffer parameter", ps[i].name, refs[i]);
        rc = MZ_EINVAL;
      } else if (ps[i].dir == MZ__OUTLIKE && ps[ref].dir == MZ__OUTLIKE) {
        snprintf(err, errlen, "parameter '%s': outlike must refer to a caller's buffer", ps[i].name);
        rc = MZ_EINVAL;
      }
      ps[i].ref = ref;
    }
  }
  free(refs);
  if (rc != MZ_OK) {
    free(ps);
    return rc;
  }
  *out = ps;
  *nout = n;
  return MZ_OK;
}

static size_t slen(const char *s) { return s ? strlen(s) + 1 : 0; }

static char *scopy(char **dst, const char *s) {
  if (!s) return NULL;
  char *p = *dst;
  size_t n = strlen(s) + 1;
  memcpy(p, s, n);
  *dst += n;
  return p;
}

int mz_kernel_create(mz_runtime *rt, const mz_kernel_spec *spec, mz_kernel **out) {
  if (out) *out = NULL;
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME) || !spec || !out)
    return mz__set_error(rt, MZ_EINVAL, "mz_kernel_create: NULL argument or not a live runtime");
  if (!spec->name || !*spec->name) return mz__set_error(rt, MZ_EINVAL, "mz_kernel_create: the kernel has no name");
  if (!spec->params) return mz__set_error(rt, MZ_EINVAL, "mz_kernel_create: kernel '%s' has no parameter list", spec->name);
  char err[256] = "";
  struct mz__param *ps = NULL;
  unsigned n = 0;
  int rc = parse_params(spec->params, &ps, &n, err, sizeof err);
  if (rc != MZ_OK) return mz__set_error(rt, rc, "kernel '%s': %s", spec->name, rc == MZ_ENOMEM ? "out of memory" : err);
  mz_kernel *k = calloc(1, sizeof *k);
  size_t sl = slen(spec->name) + slen(spec->params) + slen(spec->opencl.path) + slen(spec->opencl.options) +
              slen(spec->opencl.entry) + slen(spec->cuda.path) + slen(spec->cuda.options) + slen(spec->cuda.entry);
  char *strs = malloc(sl ? sl : 1);
  /* One slot per device of the runtime (the device list is fixed once the
   * runtime exists). */
  size_t nslots = rt->ndev ? rt->ndev : 1;
  void **prep = calloc(nslots, sizeof *prep);
  int *pst = calloc(nslots, sizeof *pst);
  uint32_t *accs = malloc(n * sizeof *accs); /* (n >= 1: the list is never empty) */
  if (!k || !strs || !prep || !pst || !accs) {
    free(k);
    free(strs);
    free(prep);
    free(pst);
    free(accs);
    free(ps);
    return mz__set_error(rt, MZ_ENOMEM, "mz_kernel_create: out of memory");
  }
  k->tag = MZ__TAG_KERNEL;
  k->rt = rt;
  k->spec = *spec;
  k->strs = strs;
  char *w = strs;
  k->spec.name = scopy(&w, spec->name);
  k->spec.params = scopy(&w, spec->params);
  k->spec.opencl.path = scopy(&w, spec->opencl.path);
  k->spec.opencl.options = scopy(&w, spec->opencl.options);
  k->spec.opencl.entry = scopy(&w, spec->opencl.entry);
  k->spec.cuda.path = scopy(&w, spec->cuda.path);
  k->spec.cuda.options = scopy(&w, spec->cuda.options);
  k->spec.cuda.entry = scopy(&w, spec->cuda.entry);
  k->params = ps;
  k->nparams = n;
  k->accs = accs;
  for (unsigned i = 0; i < n; i++) {
    if (ps[i].dir <= MZ__INOUT) k->nuser++;
    if (ps[i].dir != MZ__SCALAR && ps[i].dir <= MZ__OUTLIKE) k->nbufs++;
    if (i < 64 && mz__dir_is_buffer(ps[i].dir)) k->bufmask |= (uint64_t)1 << i;
    else if (i < 64) k->scalmask |= (uint64_t)1 << i;
  }
  /* The order mz_apply adds them in: the caller's, then the outlike ones. */
  unsigned na = 0;
  for (unsigned i = 0; i < n; i++)
    if (ps[i].dir >= MZ__IN && ps[i].dir <= MZ__INOUT) accs[na++] = i << 2 | (ps[i].dir == MZ__IN ? 1u : ps[i].dir == MZ__OUT ? 2u : 3u);
  for (unsigned i = 0; i < n; i++)
    if (ps[i].dir == MZ__OUTLIKE) accs[na++] = i << 2 | 2u;
  k->prepared = prep;
  k->prep_status = pst;
  atomic_init(&k->refs, 1);
  pthread_mutex_init(&k->lock, NULL);
  pthread_mutex_lock(&rt->lock);
  k->next = rt->kernels;
  if (rt->kernels) rt->kernels->prev = k;
  rt->kernels = k;
  pthread_mutex_unlock(&rt->lock);
  *out = k;
  return MZ_OK;
}

static void kernel_free(mz_kernel *k) {
  mz_runtime *rt = k->rt;
  for (unsigned d = 0; d < rt->ndev; d++) {
    struct mz_device *dev = rt->devs[d];
    if (k->prepared[d] && dev->ops->unprepare) dev->ops->unprepare(dev, k->prepared[d]);
  }
  pthread_mutex_lock(&rt->lock);
  if (k->prev) k->prev->next = k->next;
  else rt->kernels = k->next;
  if (k->next) k->next->prev = k->prev;
  pthread_mutex_unlock(&rt->lock);
  pthread_mutex_destroy(&k->lock);
  free(k->prepared);
  free(k->prep_status);
  free(k->params);
  free(k->accs);
  free(k->strs);
  k->tag = MZ__TAG_DEAD;
  free(k);
}

void mz__kernel_set_async(mz_kernel *k, const struct mz__async_ops *ops) {
  k->async = ops;
  if (ops) atomic_store(&k->rt->xrec_always, true);
}

void mz__kernel_unref(mz_kernel *k) {
  if (k && atomic_fetch_sub(&k->refs, 1) == 1) kernel_free(k);
}

void mz_kernel_destroy(mz_kernel *k) {
  if (!MZ__LIVE(k, MZ__TAG_KERNEL)) return; /* NULL, or destroyed already */
  k->tag = MZ__TAG_DEAD;
  k->destroyed = true;
  mz__kernel_unref(k);
}

const char *mz_kernel_name(const mz_kernel *k) { return MZ__LIVE(k, MZ__TAG_KERNEL) ? k->spec.name : NULL; }
unsigned mz_kernel_param_count(const mz_kernel *k) { return MZ__LIVE(k, MZ__TAG_KERNEL) ? k->nparams : 0; }
const mz_kernel_spec *mz__kernel_spec(const mz_kernel *k) { return &k->spec; }

int mz__kernel_prepare(mz_kernel *k, struct mz_device *dev, void **kdev, char **log) {
  *kdev = NULL;
  if (log) *log = NULL;
  unsigned d = dev->info.index;
  if (!dev->ops->prepare) return MZ_OK; /* no slot needed (CPU, sim): any device index is fine */
  if (d >= k->rt->ndev || k->rt->devs[d] != dev) return MZ_EINVAL; /* not a device of this kernel's runtime */
  /* The fast path: prepared already (published with release below). */
  if (__atomic_load_n(&k->prep_status[d], __ATOMIC_ACQUIRE) == 1) {
    *kdev = k->prepared[d];
    return MZ_OK;
  }
  pthread_mutex_lock(&k->lock);
  int st = __atomic_load_n(&k->prep_status[d], __ATOMIC_RELAXED);
  int rc = MZ_OK;
  if (st == 0) {
    void *h = NULL;
    rc = dev->ops->prepare(dev, k, &h, log);
    if (rc == MZ_OK) {
      k->prepared[d] = h;
      __atomic_store_n(&k->prep_status[d], 1, __ATOMIC_RELEASE);
    } else {
      __atomic_store_n(&k->prep_status[d], rc, __ATOMIC_RELEASE);
    }
  } else if (st < 0) {
    rc = st;
    if (log) *log = strdup("an earlier build of this kernel for this device failed");
  }
  *kdev = k->prepared[d];
  pthread_mutex_unlock(&k->lock);
  return rc;
}

int mz_kernel_build(mz_kernel *k, const mz_device *dev, char **log) {
  if (log) *log = NULL;
  if (!MZ__LIVE(k, MZ__TAG_KERNEL)) return MZ_EINVAL;
  mz_runtime *rt = k->rt;
  if (dev && (dev->rt != rt || dev->info.index >= rt->ndev || rt->devs[dev->info.index] != dev))
    return mz__set_error(rt, MZ_EINVAL, "mz_kernel_build: the device is not one of this kernel's runtime");
  if (mz__in_runtime_thread) return mz__set_error(rt, MZ_EDEADLK, "mz_kernel_build: called from a runtime thread");
  int first = MZ_OK;
  char *text = NULL;
  size_t len = 0;
  for (unsigned d = 0; d < rt->ndev; d++) {
    struct mz_device *dv = rt->devs[d];
    if (dev && dv != dev) continue;
    if (!dv->kernels || !dv->ops->can_run || !dv->ops->can_run(dv, k)) {
      if (dev) return mz__set_error(rt, MZ_ENOTSUP, "mz_kernel_build: kernel '%s' has no code for %s", k->spec.name, dv->info.name);
      continue;
    }
    void *kdev = NULL;
    char *blog = NULL;
    int rc = mz__kernel_prepare(k, dv, &kdev, &blog);
    if (rc != MZ_OK) {
      if (!first) first = rc;
      const char *body = blog ? blog : mz_strerror(rc);
      size_t add = strlen(dv->info.name) + strlen(body) + 32;
      char *t = realloc(text, len + add);
      if (t) {
        text = t;
        len += (size_t)snprintf(text + len, add, "%s%s: %s", len ? "\n" : "", dv->info.name, body);
      }
    }
    free(blog);
  }
  if (first) {
    mz__set_error(rt, first, "mz_kernel_build: kernel '%s': %s", k->spec.name, text ? text : mz_strerror(first));
    if (log) *log = text;
    else free(text);
  }
  return first;
}
