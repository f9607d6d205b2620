/* Performance models, transfer costs and the runtime clock.
 *
 * The models are a per-runtime hash table of entries, one per (kernel
 * name, device name), each with size buckets holding Welford statistics.
 * Every successful node feeds its entry from the completion path (exec.c's
 * finish, next to the policy's done hook); policies read estimates through
 * mz_task_expected_ns.  Entries are loaded from disk the first time they
 * are touched and saved when the runtime is destroyed (see perfmodel.h for
 * the files).  Only what this runtime learned (the delta) is merged into
 * the file at save time, so runtimes that share a model add up.
 *
 * Locking: one mutex guards the table, its entries and their buckets.  It
 * is a leaf lock (nothing else is taken under it) and the hot path holds it
 * for a hash probe and one Welford update.  A file is read under it only
 * the first time an entry is made. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "objects/mz_buffer.h"
#include "objects/mz_kernel.h"
#include "objects/mz_op.h"
#include "objects/mz_runtime.h"
#include "perfmodel.h"
#include "perfmodel_tick.h"

/* ---- statistics and buckets ---- */

int mz__pm_bucket_of(uint64_t bytes) {
  if (bytes < 4) return (int)bytes;
  int e = 63 - __builtin_clzll(bytes);
  return e * 4 + (int)((bytes >> (e - 2)) & 3);
}

static void stat_add(struct mz__pm_stat *s, double x, double bytes) {
  s->n++;
  double d = x - s->mean;
  s->mean += d / (double)s->n;
  s->m2 += d * (x - s->mean);
  s->bytes += (bytes - s->bytes) / (double)s->n;
}

void mz__pm_stat_merge(struct mz__pm_stat *a, const struct mz__pm_stat *b) {
  if (!b->n) return;
  if (!a->n) {
    *a = *b;
    return;
  }
  double n = (double)a->n + (double)b->n;
  double d = b->mean - a->mean;
  a->mean += d * (double)b->n / n;
  a->m2 += b->m2 + d * d * (double)a->n * (double)b->n / n;
  a->bytes += (b->bytes - a->bytes) * (double)b->n / n;
  a->n += b->n;
}

struct mz__pm_bucket *mz__pm_file_bucket(struct mz__pm_file *f, int key) {
  unsigned lo = 0, hi = f->nb;
  while (lo < hi) {
    unsigned mid = (lo + hi) / 2;
    if (f->b[mid].key < key) lo = mid + 1;
    else hi = mid;
  }
  if (lo < f->nb && f->b[lo].key == key) return &f->b[lo];
  if (f->nb == f->capb) {
    unsigned cap = f->capb ? f->capb * 2 : 8;
    struct mz__pm_bucket *v = realloc(f->b, cap * sizeof *v);
    if (!v) return NULL;
    f->b = v;
    f->capb = cap;
  }
  memmove(&f->b[lo + 1], &f->b[lo], (f->nb - lo) * sizeof *f->b);
  f->nb++;
  memset(&f->b[lo], 0, sizeof f->b[lo]);
  f->b[lo].key = key;
  return &f->b[lo];
}

void mz__pm_file_free(struct mz__pm_file *f) {
  if (!f) return;
  free(f->b);
  f->b = NULL;
  f->nb = f->capb = 0;
}

/* ---- files ---- */

char *mz__pm_dir(char *buf, size_t cap) {
  const char *d = getenv("MZ_PERFMODEL_DIR");
  buf[0] = 0;
  if (d && *d) {
    if (strcmp(d, "off")) snprintf(buf, cap, "%s", d);
    return buf;
  }
  const char *x = getenv("XDG_CACHE_HOME");
  const char *h = getenv("HOME");
  if (x && *x) snprintf(buf, cap, "%s/maize", x);
  else if (h && *h) snprintf(buf, cap, "%s/.cache/maize", h);
  return buf;
}

static void sanitize(char *out, size_t cap, const char *in) {
  size_t n = 0;
  for (; *in && n + 1 < cap; in++) {
    char c = *in;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              (c == '.' && n > 0);
    out[n++] = ok ? c : '_';
  }
  out[n] = 0;
}

void mz__pm_path(char *buf, size_t cap, const char *dir, const char *kernel, const char *device) {
  char k[100], d[100];
  sanitize(k, sizeof k, kernel);
  sanitize(d, sizeof d, device);
  snprintf(buf, cap, "%s/%s@%s.model", dir, k, d);
}

/* Strip the newline; false when the line was cut (too long). */
static bool chomp(char *line) {
  size_t n = strlen(line);
  if (!n || line[n - 1] != '\n') return false;
  line[n - 1] = 0;
  return true;
}

int mz__pm_read(const char *path, struct mz__pm_file *f, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  int orc = MZ_OK;
  FILE *fp = mz__fopen_regular(path, &orc, err, errlen);
  if (!fp) return orc;
  char line[2 * MZ__PM_NAMELEN];
  int rc = MZ_EINVAL;
  unsigned ver = 0;
  if (!fgets(line, sizeof line, fp) || !chomp(line) || sscanf(line, "maize-perfmodel %u", &ver) != 1) {
    snprintf(err, errlen, "not a maize perf model");
    goto out;
  }
  if (ver != MZ__PM_VERSION) {
    snprintf(err, errlen, "perf model version %u, this maize reads %u", ver, MZ__PM_VERSION);
    goto out;
  }
  if (!fgets(line, sizeof line, fp) || !chomp(line) || strncmp(line, "kernel ", 7) ||
      strlen(line + 7) >= MZ__PM_NAMELEN) {
    snprintf(err, errlen, "corrupt: no kernel line");
    goto out;
  }
  snprintf(f->kernel, sizeof f->kernel, "%s", line + 7);
  if (!fgets(line, sizeof line, fp) || !chomp(line) || strncmp(line, "device ", 7) ||
      strlen(line + 7) >= MZ__PM_NAMELEN) {
    snprintf(err, errlen, "corrupt: no device line");
    goto out;
  }
  snprintf(f->device, sizeof f->device, "%s", line + 7);
  for (;;) {
    if (!fgets(line, sizeof line, fp) || !chomp(line)) {
      snprintf(err, errlen, "corrupt: truncated");
      goto out;
    }
    unsigned count;
    char extra;
    if (sscanf(line, "end %u %c", &count, &extra) == 1) {
      if (count != f->nb) {
        snprintf(err, errlen, "corrupt: %u buckets, the end line says %u", f->nb, count);
        goto out;
      }
      if (fgets(line, sizeof line, fp)) {
        snprintf(err, errlen, "corrupt: data after the end line");
        goto out;
      }
      rc = MZ_OK;
      goto out;
    }
    int key;
    unsigned long long n;
    double mean, m2, bytes;
    if (sscanf(line, "%d %llu %lg %lg %lg %c", &key, &n, &mean, &m2, &bytes, &extra) != 5 || key < 0 || key > 400 ||
        !n || !isfinite(mean) || mean < 0 || !isfinite(m2) || m2 < 0 || !isfinite(bytes) || bytes < 0 ||
        (f->nb && f->b[f->nb - 1].key >= key)) {
      snprintf(err, errlen, "corrupt: bad bucket line '%.40s'", line);
      goto out;
    }
    struct mz__pm_bucket *b = mz__pm_file_bucket(f, key);
    if (!b) {
      snprintf(err, errlen, "out of memory");
      rc = MZ_ENOMEM;
      goto out;
    }
    b->s = (struct mz__pm_stat){.n = n, .mean = mean, .m2 = m2, .bytes = bytes};
  }
out:
  fclose(fp);
  if (rc) mz__pm_file_free(f);
  return rc;
}

/* Atomic file writes: a temporary file beside path (unique per thread and
 * moment, so concurrent runtimes never share one), then fsync and rename.
 * atomic_open returns the stream, or NULL with nothing left behind. */
static FILE *atomic_open(const char *path, char *tmp, size_t tmpsz) {
  snprintf(tmp, tmpsz, "%s.tmp.%ld.%ld.%llu", path, (long)getpid(), (long)gettid(), (unsigned long long)mz__now_ns());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return NULL;
  FILE *fp = fdopen(fd, "w");
  if (!fp) {
    close(fd);
    unlink(tmp);
  }
  return fp;
}

/* Finish what atomic_open began: ok says every write succeeded. */
static int atomic_commit(FILE *fp, const char *tmp, const char *path, bool ok) {
  ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
  ok = (fclose(fp) == 0) && ok;
  if (!ok || rename(tmp, path)) {
    unlink(tmp);
    return MZ_EIO;
  }
  return MZ_OK;
}

int mz__pm_write(const char *path, const struct mz__pm_file *f) {
  char tmp[4400];
  FILE *fp = atomic_open(path, tmp, sizeof tmp);
  if (!fp) return MZ_EIO;
  bool ok = fprintf(fp, "maize-perfmodel %d\nkernel %s\ndevice %s\n", MZ__PM_VERSION, f->kernel, f->device) > 0;
  for (unsigned i = 0; ok && i < f->nb; i++) {
    const struct mz__pm_stat *s = &f->b[i].s;
    ok = fprintf(fp, "%d %llu %.17g %.17g %.17g\n", f->b[i].key, (unsigned long long)s->n, s->mean, s->m2, s->bytes) > 0;
  }
  ok = ok && fprintf(fp, "end %u\n", f->nb) > 0;
  return atomic_commit(fp, tmp, path, ok);
}

static int mkdirs(const char *dir) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) && errno != EEXIST) return MZ_EIO;
    *p = '/';
  }
  if (mkdir(buf, 0755) && errno != EEXIST) return MZ_EIO;
  return MZ_OK;
}

/* The folder a user named in MZ_PERFMODEL_DIR is created only if its parent
 * exists (a typo must not build a tree from the filesystem's root); the
 * default one under $XDG_CACHE_HOME or ~/.cache is created with its
 * parents. */
static int pm_mkdir(const char *dir) {
  const char *env = getenv("MZ_PERFMODEL_DIR");
  if (env && *env && !strcmp(env, dir)) return mkdir(dir, 0755) && errno != EEXIST ? MZ_EIO : MZ_OK;
  return mkdirs(dir);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One printed line of the models' table. */
struct pm_row {
  char kernel[MZ__PM_NAMELEN], device[MZ__PM_NAMELEN];
  double bytes, mean, sd;
  unsigned long long n;
};

static bool pm_match(const char *name, const char *filter) { return !filter || !*filter || strstr(name, filter); }

int mz__pm_print(FILE *out, const char *dir) { return mz__pm_print_filtered(out, dir, NULL, NULL); }

int mz__pm_print_filtered(FILE *out, const char *dir, const char *kernel, const char *device) {
  DIR *d = opendir(dir);
  if (!d) return MZ_EIO;
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t l = strlen(e->d_name);
    bool model = l >= 7 && !strcmp(e->d_name + l - 6, ".model"), link = l >= 6 && !strcmp(e->d_name + l - 5, ".link");
    if (!model && !link) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      char **v = realloc(names, cap * sizeof *v);
      if (!v) break;
      names = v;
    }
    names[n] = strdup(e->d_name);
    if (names[n]) n++;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, by_name);
  /* Read the rows first, so the columns are as wide as their longest
   * names (device names such as PoCL's run past any fixed width). */
  struct pm_row *rows = NULL;
  size_t nrows = 0, caprows = 0;
  int wk = (int)strlen("kernel"), wd = (int)strlen("device"), models = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4400], err[160];
    size_t l = strlen(names[i]);
    if (l >= 5 && !strcmp(names[i] + l - 5, ".link")) continue; /* below */
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct mz__pm_file f;
    if (mz__pm_read(path, &f, err, sizeof err)) {
      if (!kernel && !device) fprintf(out, "# %s: ignored (%s)\n", names[i], err);
      continue;
    }
    if (pm_match(f.kernel, kernel) && pm_match(f.device, device)) {
      models++;
      for (unsigned k = 0; k < f.nb; k++) {
        if (nrows == caprows) {
          caprows = caprows ? 2 * caprows : 64;
          struct pm_row *v = realloc(rows, caprows * sizeof *v);
          if (!v) break;
          rows = v;
        }
        const struct mz__pm_stat *st = &f.b[k].s;
        struct pm_row *r = &rows[nrows++];
        snprintf(r->kernel, sizeof r->kernel, "%s", f.kernel);
        snprintf(r->device, sizeof r->device, "%s", f.device);
        r->bytes = st->bytes;
        r->n = (unsigned long long)st->n;
        r->mean = st->mean;
        r->sd = st->n > 1 ? sqrt(st->m2 / (double)(st->n - 1)) : 0;
        if ((int)strlen(r->kernel) > wk) wk = (int)strlen(r->kernel);
        if ((int)strlen(r->device) > wd) wd = (int)strlen(r->device);
      }
    }
    mz__pm_file_free(&f);
  }
  fprintf(out, "%-*s  %-*s %12s %8s %12s %12s\n", wk, "kernel", wd, "device", "bytes", "count", "mean_us", "stddev_us");
  for (size_t i = 0; i < nrows; i++)
    fprintf(out, "%-*s  %-*s %12.0f %8llu %12.3f %12.3f\n", wk, rows[i].kernel, wd, rows[i].device, rows[i].bytes,
            rows[i].n, rows[i].mean / 1e3, rows[i].sd / 1e3);
  free(rows);
  /* Links (transfer costs), after the models; a device filter keeps the
   * links with that device at either end, a kernel filter none. */
  struct link_row {
    char src[MZ__PM_NAMELEN], dst[MZ__PM_NAMELEN];
    double lat, pb;
  } *links = NULL;
  size_t nlinks = 0;
  int ws = (int)strlen("link from"), wt = (int)strlen("to");
  for (size_t i = 0; i < n && !(kernel && *kernel); i++) {
    char path[4400], err[160];
    size_t l = strlen(names[i]);
    if (l < 5 || strcmp(names[i] + l - 5, ".link")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct link_row lr;
    if (mz__link_read(path, lr.src, lr.dst, sizeof lr.src, &lr.lat, &lr.pb, err, sizeof err)) {
      if (!device) fprintf(out, "# %s: ignored (%s)\n", names[i], err);
      continue;
    }
    if (device && *device && !strstr(lr.src, device) && !strstr(lr.dst, device)) continue;
    struct link_row *v = realloc(links, (nlinks + 1) * sizeof *v);
    if (!v) break;
    links = v;
    links[nlinks++] = lr;
    if ((int)strlen(lr.src) > ws) ws = (int)strlen(lr.src);
    if ((int)strlen(lr.dst) > wt) wt = (int)strlen(lr.dst);
  }
  if (nlinks) fprintf(out, "\n%-*s  %-*s %12s %12s\n", ws, "link from", wt, "to", "latency_us", "GB/s");
  for (size_t i = 0; i < nlinks; i++)
    fprintf(out, "%-*s  %-*s %12.3f %12.3f\n", ws, links[i].src, wt, links[i].dst, links[i].lat / 1e3,
            links[i].pb > 0 ? 1.0 / links[i].pb : INFINITY);
  free(links);
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return models;
}

/* ---- the runtime's table ---- */

struct pm_entry {
  struct mz__pm_file all;    /* loaded history plus what this runtime learned */
  struct mz__pm_file delta;  /* what this runtime learned, merged into the file at save */
  uint64_t hash;
  bool fit_stale, fit_ok;
  double fa, fb;             /* log(ns) = fa + fb * log(bytes) */
};

/* The sampling (struct mz__pm_queue, perfmodel_tick.h).  Once the bucket
 * a node feeds holds MZ__PM_SATURATED samples (the node keeps that verdict: pm_sat1), the node is timed and recorded
 * only on one tick of its queue in MZ__PM_SAMPLE_EVERY (the rest skip the
 * clock and the models' lock): the mean and variance stay unbiased, the
 * count grows more slowly.  The verdict is the node's, not the queue's,
 * so that two kernels alternating on a queue are sampled no more often
 * than one. */
#define MZ__PM_SATURATED 256
#define MZ__PM_SAMPLE_EVERY 16
/* And past this many, one in MZ__PM_SAMPLE_RARELY: a sample (the models'
 * lock, a hash lookup, two divisions) cost about 470 instructions, 30 per
 * node of a re-run at one in 16. */
#define MZ__PM_SETTLED 4096
#define MZ__PM_SAMPLE_RARELY 128
struct hop;
struct link_tab;

struct mz__perfmodel {
  struct mz__pm_hot hot;     /* first: see perfmodel_tick.h */
  pthread_mutex_t lock;
  struct pm_entry **tab;
  size_t cap, n;
  char dir[4096];
  bool persist;
  const struct mz_device *clock_dev;
  unsigned *dev_class;
  uint64_t *dev_hash;
  /* Transfer costs (see "transfer costs" below). */
  unsigned ncls;             /* device classes */
  struct mz_device **cls_dev; /* the first device of each class */
  unsigned *mem_row;         /* per memory node: 0 host, else 1 + class */
  struct hop *hop_to, *hop_from; /* per class: host to device, device to host */
  _Atomic(struct link_tab *) links;
  _Atomic bool links_settled;
  pthread_mutex_t link_lock; /* measuring; a leaf lock */
};

static uint64_t fnv(const char *s, uint64_t h) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int links_create(mz_runtime *rt, struct mz__perfmodel *pm);
static void links_free(struct mz__perfmodel *pm);

int mz__perfmodel_create(mz_runtime *rt) {
  struct mz__perfmodel *pm = calloc(1, sizeof *pm);
  if (!pm) return MZ_ENOMEM;
  pm->cap = 64;
  pm->tab = calloc(pm->cap, sizeof *pm->tab);
  pm->dev_class = calloc(rt->ndev + 1, sizeof *pm->dev_class);
  pm->dev_hash = calloc(rt->ndev + 1, sizeof *pm->dev_hash);
  pm->hot.qs = aligned_alloc(64, (rt->nq + 1) * sizeof *pm->hot.qs);
  if (pm->hot.qs) memset((void *)pm->hot.qs, 0, (rt->nq + 1) * sizeof *pm->hot.qs);
  if (!pm->tab || !pm->dev_class || !pm->dev_hash || !pm->hot.qs) {
    free(pm->tab);
    free(pm->dev_class);
    free(pm->dev_hash);
    free(pm->hot.qs);
    free(pm);
    return MZ_ENOMEM;
  }
  pthread_mutex_init(&pm->lock, NULL);
  mz__pm_dir(pm->dir, sizeof pm->dir);
  pm->persist = pm->dir[0] != 0;
  unsigned nclass = 0;
  for (unsigned d = 0; d < rt->ndev; d++) {
    const struct mz_device *dev = rt->devs[d];
    pm->dev_hash[d] = fnv(dev->info.name, 1469598103934665603ull);
    if (!pm->clock_dev && dev->ops->clock) pm->clock_dev = dev;
    unsigned c = nclass;
    for (unsigned e = 0; e < d && c == nclass; e++)
      if (rt->devs[e]->type == dev->type && !strcmp(rt->devs[e]->info.name, dev->info.name)) c = pm->dev_class[e];
    pm->dev_class[d] = c;
    if (c == nclass) nclass++;
  }
  pm->ncls = nclass;
  pm->cls_dev = calloc(nclass + 1, sizeof *pm->cls_dev);
  pthread_mutex_init(&pm->link_lock, NULL);
  rt->pm = pm;
  if (pm->cls_dev)
    for (unsigned d = rt->ndev; d-- > 0;) pm->cls_dev[pm->dev_class[d]] = rt->devs[d];
  int rc = pm->cls_dev ? links_create(rt, pm) : MZ_ENOMEM;
  if (rc) mz__perfmodel_destroy(rt);
  return rc;
}

static void entry_free(struct pm_entry *e) {
  mz__pm_file_free(&e->all);
  mz__pm_file_free(&e->delta);
  free(e);
}

/* Merge e's delta into its file under the file's lock. */
static void entry_save(mz_runtime *rt, struct mz__perfmodel *pm, struct pm_entry *e) {
  char path[4400], lock[4500], err[160];
  mz__pm_path(path, sizeof path, pm->dir, e->all.kernel, e->all.device);
  snprintf(lock, sizeof lock, "%s.lock", path);
  int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd >= 0) flock(lfd, LOCK_EX);
  struct mz__pm_file cur;
  int rc = mz__pm_read(path, &cur, err, sizeof err);
  if (rc == MZ_OK && (strcmp(cur.kernel, e->all.kernel) || strcmp(cur.device, e->all.device))) {
    mz__pm_file_free(&cur);
    rc = MZ_EINVAL;
    snprintf(err, sizeof err, "it holds another model");
  }
  if (rc) {
    if (rc != MZ_ENOENT) mz__warn(rt, "perf model '%s' is replaced: %s", path, err);
    memset(&cur, 0, sizeof cur);
    snprintf(cur.kernel, sizeof cur.kernel, "%s", e->all.kernel);
    snprintf(cur.device, sizeof cur.device, "%s", e->all.device);
  }
  bool ok = true;
  for (unsigned i = 0; i < e->delta.nb && ok; i++) {
    struct mz__pm_bucket *b = mz__pm_file_bucket(&cur, e->delta.b[i].key);
    if (b) mz__pm_stat_merge(&b->s, &e->delta.b[i].s);
    else ok = false;
  }
  if (ok && mz__pm_write(path, &cur)) mz__warn(rt, "cannot write perf model '%s'", path);
  mz__pm_file_free(&cur);
  if (lfd >= 0) {
    flock(lfd, LOCK_UN);
    close(lfd);
  }
}

void mz__perfmodel_destroy(mz_runtime *rt) {
  struct mz__perfmodel *pm = rt->pm;
  if (!pm) return;
  bool dir_ok = pm->persist && pm_mkdir(pm->dir) == MZ_OK;
  if (pm->persist && !dir_ok) mz__warn(rt, "perf models are not saved: cannot create '%s'", pm->dir);
  for (size_t i = 0; i < pm->cap; i++) {
    struct pm_entry *e = pm->tab[i];
    if (!e) continue;
    if (dir_ok && e->delta.nb) entry_save(rt, pm, e);
    entry_free(e);
  }
  pthread_mutex_destroy(&pm->lock);
  pthread_mutex_destroy(&pm->link_lock);
  links_free(pm);
  free(pm->cls_dev);
  free(pm->tab);
  free(pm->dev_class);
  free(pm->dev_hash);
  free(pm->hot.qs);
  free(pm);
  rt->pm = NULL;
}

static const char *task_model_name(const mz_op *op) {
  /* The task's, on the line a CPU node's run touches anyway; a named host
   * node's cold record only for host work. */
  const struct mz__task *t = mz__task_of(op);
  const mz_kernel *k = mz__task_kernel(t);
  return k ? k->spec.name : mz__op_name(op);
}

static bool table_grow(struct mz__perfmodel *pm) {
  size_t cap = pm->cap * 2;
  struct pm_entry **v = calloc(cap, sizeof *v);
  if (!v) return false;
  for (size_t i = 0; i < pm->cap; i++) {
    struct pm_entry *e = pm->tab[i];
    if (!e) continue;
    size_t j = e->hash & (cap - 1);
    while (v[j]) j = (j + 1) & (cap - 1);
    v[j] = e;
  }
  free(pm->tab);
  pm->tab = v;
  pm->cap = cap;
  return true;
}

/* The entry of (name, device), made and loaded from disk when create is
 * set.  pm->lock is held. */
static struct pm_entry *entry_get(mz_runtime *rt, struct mz__perfmodel *pm, const char *name,
                                  const struct mz_device *dev, bool create) {
  uint64_t h = fnv(name, pm->dev_hash[dev->info.index]);
  size_t j = h & (pm->cap - 1);
  for (struct pm_entry *e; (e = pm->tab[j]); j = (j + 1) & (pm->cap - 1))
    if (e->hash == h && !strcmp(e->all.kernel, name) && !strcmp(e->all.device, dev->info.name)) return e;
  if (!create || strlen(name) >= MZ__PM_NAMELEN || strlen(dev->info.name) >= MZ__PM_NAMELEN) return NULL;
  if (2 * (pm->n + 1) > pm->cap) {
    if (!table_grow(pm)) return NULL;
    j = h & (pm->cap - 1);
    while (pm->tab[j]) j = (j + 1) & (pm->cap - 1);
  }
  struct pm_entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->hash = h;
  if (pm->persist) {
    char path[4400], err[160];
    mz__pm_path(path, sizeof path, pm->dir, name, dev->info.name);
    int rc = mz__pm_read(path, &e->all, err, sizeof err);
    if (rc == MZ_OK && (strcmp(e->all.kernel, name) || strcmp(e->all.device, dev->info.name))) {
      mz__pm_file_free(&e->all);
      rc = MZ_EINVAL;
      snprintf(err, sizeof err, "it holds another model");
    }
    if (rc && rc != MZ_ENOENT) mz__warn(rt, "perf model '%s' is ignored: %s", path, err);
    if (rc) memset(&e->all, 0, sizeof e->all);
  }
  snprintf(e->all.kernel, sizeof e->all.kernel, "%s", name);
  snprintf(e->all.device, sizeof e->all.device, "%s", dev->info.name);
  snprintf(e->delta.kernel, sizeof e->delta.kernel, "%s", name);
  snprintf(e->delta.device, sizeof e->delta.device, "%s", dev->info.name);
  e->fit_stale = true;
  pm->tab[j] = e;
  pm->n++;
  return e;
}

/* A sample taken: into the model's buckets under its lock.  Apart from
 * mz__perfmodel_record, which skips most samples, so that a skipped one
 * costs no more than its test (this one saves many registers). */
static __attribute__((noinline)) void record_sample(mz_runtime *rt, unsigned q, const char *name, const mz_op *op,
                                                    const struct mz_device *dev, int key, uint64_t ns) {
  struct mz__perfmodel *pm = rt->pm;
  pthread_mutex_lock(&pm->lock);
  struct pm_entry *e = entry_get(rt, pm, name, dev, true);
  struct mz__pm_bucket *a = e ? mz__pm_file_bucket(&e->all, key) : NULL;
  struct mz__pm_bucket *d = a ? mz__pm_file_bucket(&e->delta, key) : NULL;
  if (d) {
    /* The node's size feeds the bucket's mean size, settled once the
     * bucket is saturated: from then on its mean stands in, which spares
     * the sum over the node's buffers (a cache line each, and the access
     * list's). */
    double bytes = a->s.n < MZ__PM_SATURATED ? (double)mz_task_bytes((const mz_task *)op) : a->s.bytes;
    stat_add(&a->s, (double)ns, bytes);
    stat_add(&d->s, (double)ns, bytes);
    if (a->s.n == MZ_PERFMODEL_MIN_SAMPLES) e->fit_stale = true;
    /* A plan kept for re-runs (graph/lower.c) was made from estimates:
     * one that appears (the bucket's third sample) or whose mean moved by
     * more than an eighth since it last did so makes the next re-run plan
     * again.  A settled model moves no more, so its plans are kept. */
    if (a->s.n >= MZ_PERFMODEL_MIN_SAMPLES &&
        (a->said <= 0 || fabs(a->s.mean - a->said) * 8 > a->said)) {
      a->said = a->s.mean;
      atomic_fetch_add_explicit(&rt->plan_epoch, 1, memory_order_relaxed);
    }
    /* The task remembers that its bucket on dev is saturated: its later
     * runs there are then sampled one in MZ__PM_SAMPLE_EVERY. */
    struct mz__task *t = mz__task_of(op);
    t->pm_sat1 = a->s.n >= MZ__PM_SATURATED && dev->info.index < 255 ? (uint8_t)(dev->info.index + 1) : 0;
    t->pm_mask = (uint8_t)(a->s.n >= MZ__PM_SETTLED ? MZ__PM_SAMPLE_RARELY - 1 : MZ__PM_SAMPLE_EVERY - 1);
    struct mz__pm_queue *pq = &pm->hot.qs[q];
    atomic_store_explicit(&pq->sat_name, t->pm_sat1 ? name : NULL, memory_order_relaxed);
    atomic_store_explicit(&pq->sat_key, key, memory_order_relaxed);
    atomic_store_explicit(&pq->sat_dev, dev, memory_order_relaxed);
    atomic_store_explicit(&pq->sat_mask, t->pm_mask, memory_order_relaxed);
    atomic_store_explicit(&pq->sat_kernel, t->pm_sat1 && key < 255 ? (const void *)mz__task_kernel(t) : NULL, memory_order_relaxed);
    atomic_store_explicit(&pq->sat_key1, (uint8_t)(key < 255 ? key + 1 : 0), memory_order_relaxed);
    atomic_store_explicit(&pq->sat_dev1, t->pm_sat1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&pm->lock);
}

/* The node's size bucket: kept in its op (pm_key1), since the sum over
 * its buffers costs more than the rest of a skipped sample. */
static int task_key(const mz_op *op) {
  struct mz__task *t = mz__task_of(op);
  int key = op->pm_key1 - 1;
  if (__builtin_expect(key < 0, 0)) {
    key = mz__pm_bucket_of((uint64_t)mz_task_bytes((const mz_task *)op));
    mz__task_op(t)->pm_key1 = key < 255 ? (uint8_t)(key + 1) : 0;
  }
  return key;
}

/* For a node with no verdict on dev (perfmodel.h). */
bool mz__perfmodel_due_new(struct mz__pm_queue *pq, const mz_op *op, const struct mz_device *dev, uint32_t tick) {
  struct mz__task *t = mz__task_of(op);
  if (atomic_load_explicit(&pq->sat_name, memory_order_relaxed) == task_model_name(op) &&
      atomic_load_explicit(&pq->sat_key, memory_order_relaxed) == task_key(op) &&
      atomic_load_explicit(&pq->sat_dev, memory_order_relaxed) == dev && dev->info.index < 255) {
    /* Its bucket is the saturated one: the node takes the verdict (it is
     * run by this thread alone). */
    t->pm_sat1 = (uint8_t)(dev->info.index + 1);
    t->pm_mask = atomic_load_explicit(&pq->sat_mask, memory_order_relaxed);
    return !(tick & t->pm_mask);
  }
  return true;
}

void mz__perfmodel_record(mz_runtime *rt, const mz_op *op, const struct mz_device *dev, unsigned q, uint64_t ns,
                          bool chosen) {
  struct mz__perfmodel *pm = rt->pm;
  if (!pm) return;
  /* A rough per-queue time per node, for queue ready estimates. */
  struct mz__pm_queue *pq = &pm->hot.qs[q];
  uint64_t old = atomic_load_explicit(&pq->ema, memory_order_relaxed);
  atomic_store_explicit(&pq->ema, old ? (old * 7 + ns) / 8 : ns, memory_order_relaxed);
  if (!chosen) { /* asked here, once: it advances q's tick */
    uint32_t tick;
    int due = mz__pm_due(pq, mz__task_of(op), dev->info.index + 1, &tick);
    if (!(due >= 0 ? due : mz__perfmodel_due_new(pq, op, dev, tick))) return;
  }
  record_sample(rt, q, task_model_name(op), op, dev, task_key(op), ns);
}

/* Least squares of log(ns) on log(bytes) over the calibrated buckets. */
static void entry_fit(struct pm_entry *e) {
  e->fit_stale = false;
  e->fit_ok = false;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  unsigned n = 0;
  for (unsigned i = 0; i < e->all.nb; i++) {
    const struct mz__pm_stat *s = &e->all.b[i].s;
    if (s->n < MZ_PERFMODEL_MIN_SAMPLES || s->bytes < 1 || s->mean <= 0) continue;
    double x = log(s->bytes), y = log(s->mean);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    n++;
  }
  if (n < 2) return;
  double den = n * sxx - sx * sx;
  if (den <= 1e-12) return;
  double b = (n * sxy - sx * sy) / den;
  /* Time does not shrink with size, nor grow faster than cubically. */
  if (b < 0) b = 0;
  if (b > 3) b = 3;
  e->fb = b;
  e->fa = (sy - b * sx) / n;
  e->fit_ok = true;
}

static double history_ns(mz_runtime *rt, const mz_op *op, const struct mz_device *dev) {
  struct mz__perfmodel *pm = rt->pm;
  if (!pm) return -1;
  double bytes = (double)mz_task_bytes((const mz_task *)op);
  int key = mz__pm_bucket_of((uint64_t)bytes);
  double v = -1;
  pthread_mutex_lock(&pm->lock);
  struct pm_entry *e = entry_get(rt, pm, task_model_name(op), dev, true);
  if (e) {
    unsigned lo = 0, hi = e->all.nb;
    while (lo < hi) {
      unsigned mid = (lo + hi) / 2;
      if (e->all.b[mid].key < key) lo = mid + 1;
      else hi = mid;
    }
    if (lo < e->all.nb && e->all.b[lo].key == key && e->all.b[lo].s.n >= MZ_PERFMODEL_MIN_SAMPLES) {
      v = e->all.b[lo].s.mean;
    } else {
      if (e->fit_stale) entry_fit(e);
      if (e->fit_ok && bytes >= 1) v = exp(e->fa + e->fb * log(bytes));
    }
  }
  pthread_mutex_unlock(&pm->lock);
  return v;
}

/* ---- the policy's view of costs ---- */

uint64_t mz__runtime_clock(const mz_runtime *rt) {
  const struct mz_device *d = rt->pm ? rt->pm->clock_dev : NULL;
  return d ? d->ops->clock(d) : mz__now_ns();
}

uint64_t mz_sched_now_ns(const mz_sched *s) { return mz__runtime_clock(s->rt); }

double mz_task_expected_ns(const mz_sched *s, const mz_task *t, unsigned q) {
  mz_runtime *rt = s->rt;
  if (q >= rt->nq) return -1;
  const mz_op *op = (const mz_op *)t;
  const struct mz_device *dev = rt->queues[q]->dev;
  if (dev->ops->estimate_ns) {
    double v = dev->ops->estimate_ns(dev, op);
    if (v >= 0) return v;
  }
  return history_ns(rt, op, dev);
}

/* ---- transfer costs: one link per pair of memory kinds ----
 *
 * A transfer costs lat + bytes * per_byte.  Links are kept per pair of
 * rows, row 0 being host memory and row 1 + c the memory of a device of
 * class c (devices of one class share a model), in an immutable table
 * that policies read without a lock; a measurement publishes a new table
 * (the old ones are freed with the models).  Where they come from:
 *  - a backend that models its links (the simulator) answers link_ns: its
 *    configured link, never measured;
 *  - otherwise each hop between host memory and a device class is measured
 *    once (mz_sched_measure_links, called by the cost-based policies' init):
 *    a small and a large synchronous copy through the device's mem_write
 *    (host to device) and mem_read (device to host), fitted to latency +
 *    bytes / bandwidth, and saved as "<src>@<dst>.link" beside the models,
 *    written atomically; a later runtime loads the file instead.  Until
 *    then, and where measuring fails, a default stands in (a PCIe-like link);
 *  - peers of one backend copying directly (can_copy_peer) use the
 *    backend's model, else the two measured hops through host memory (an
 *    upper bound: there is no synchronous peer copy to time). */

#define MZ__LINK_VERSION 2 /* 2: the large copy outgrows caches */

struct mz__link {
  double lat, per_byte;
};

struct link_tab {
  struct link_tab *older; /* published before this one; freed at destroy */
  unsigned n;             /* rows: 1 + classes */
  struct mz__link v[];    /* [src row * n + dst row] */
};

enum { LINK_DEFAULT, LINK_BACKEND, LINK_MEASURED };

/* One hop between host memory and a device class, in one direction. */
struct hop {
  struct mz__link l;
  int from; /* LINK_* */
};

static double default_link(const struct mz_device *dev, size_t bytes) {
  if (dev->info.unified_memory) return 1e3 + (double)bytes / 20.0;
  return 10e3 + (double)bytes / 8.0;
}

/* A backend's model as a link, when it answers for (dst, src). */
static bool backend_link(const struct mz_device *dst, const struct mz_device *src, struct mz__link *l) {
  const struct mz_device *d = dst ? dst : src;
  if (!d->ops->link_ns) return false;
  double a = d->ops->link_ns(dst, src, 0), b = d->ops->link_ns(dst, src, 1u << 20);
  if (a < 0 || b < 0) return false;
  l->lat = a;
  l->per_byte = (b - a) / (double)(1u << 20);
  return true;
}

static struct hop hop_init(const struct mz_device *dst, const struct mz_device *src) {
  struct hop h = {.from = LINK_BACKEND};
  if (!backend_link(dst, src, &h.l)) {
    const struct mz_device *d = dst ? dst : src;
    h.l.lat = default_link(d, 0);
    h.l.per_byte = default_link(d, 1u << 20) / (double)(1u << 20) - h.l.lat / (double)(1u << 20);
    h.from = LINK_DEFAULT;
  }
  return h;
}

/* Build and publish the table from the hops (pm->link_lock held, or at
 * create). */
static int links_publish(mz_runtime *rt, struct mz__perfmodel *pm) {
  unsigned n = pm->ncls + 1;
  struct link_tab *t = calloc(1, sizeof *t + (size_t)n * n * sizeof t->v[0]);
  if (!t) return MZ_ENOMEM;
  t->n = n;
  for (unsigned a = 0; a < n; a++)
    for (unsigned b = 0; b < n; b++) {
      struct mz__link *l = &t->v[a * n + b];
      const struct mz_device *sd = a ? pm->cls_dev[a - 1] : NULL, *dd = b ? pm->cls_dev[b - 1] : NULL;
      if (!a && !b) continue; /* host to host: nothing moves */
      if (!a) *l = pm->hop_to[b - 1].l;
      else if (!b) *l = pm->hop_from[a - 1].l;
      else if (sd->ops == dd->ops && dd->ops->can_copy_peer && dd->ops->can_copy_peer(dd, sd)) {
        if (!backend_link(dd, sd, l)) {
          const struct hop *x = &pm->hop_from[a - 1], *y = &pm->hop_to[b - 1];
          if (x->from == LINK_MEASURED && y->from == LINK_MEASURED)
            *l = (struct mz__link){x->l.lat + y->l.lat, x->l.per_byte + y->l.per_byte};
          else
            *l = (struct mz__link){default_link(dd, 0), 1.0 / 8.0};
        }
      } else {
        const struct mz__link *x = &pm->hop_from[a - 1].l, *y = &pm->hop_to[b - 1].l;
        *l = (struct mz__link){x->lat + y->lat, x->per_byte + y->per_byte};
      }
    }
  (void)rt;
  t->older = atomic_load_explicit(&pm->links, memory_order_relaxed);
  atomic_store_explicit(&pm->links, t, memory_order_release);
  return MZ_OK;
}

static int links_create(mz_runtime *rt, struct mz__perfmodel *pm) {
  pm->hop_to = calloc(pm->ncls + 1, sizeof *pm->hop_to);
  pm->hop_from = calloc(pm->ncls + 1, sizeof *pm->hop_from);
  pm->mem_row = calloc(rt->nmem + 1, sizeof *pm->mem_row);
  if (!pm->hop_to || !pm->hop_from || !pm->mem_row) return MZ_ENOMEM;
  for (unsigned c = 0; c < pm->ncls; c++) {
    const struct mz_device *d = pm->cls_dev[c];
    if (d->ops->host_memory) continue; /* never a row that moves data */
    pm->hop_to[c] = hop_init(d, NULL);
    pm->hop_from[c] = hop_init(NULL, d);
  }
  for (unsigned m = 1; m < rt->nmem; m++) pm->mem_row[m] = 1 + pm->dev_class[rt->mem_dev[m]->info.index];
  return links_publish(rt, pm);
}

static void links_free(struct mz__perfmodel *pm) {
  for (struct link_tab *t = atomic_load(&pm->links), *o; t; t = o) {
    o = t->older;
    free(t);
  }
  free(pm->hop_to);
  free(pm->hop_from);
  free(pm->mem_row);
}

static void link_path(char *buf, size_t cap, const char *dir, const char *src, const char *dst) {
  char s[100], d[100];
  sanitize(s, sizeof s, src);
  sanitize(d, sizeof d, dst);
  snprintf(buf, cap, "%s/%s@%s.link", dir, s, d);
}

int mz__link_read(const char *path, char *src, char *dst, size_t namecap, double *lat, double *per_byte, char *err,
                  size_t errlen) {
  int orc = MZ_OK;
  FILE *fp = mz__fopen_regular(path, &orc, err, errlen);
  if (!fp) return orc;
  char line[2 * MZ__PM_NAMELEN];
  unsigned ver = 0;
  int rc = MZ_EINVAL;
  char extra;
  if (!fgets(line, sizeof line, fp) || !chomp(line) || sscanf(line, "maize-link %u", &ver) != 1) {
    snprintf(err, errlen, "not a maize link file");
  } else if (ver != MZ__LINK_VERSION) {
    snprintf(err, errlen, "link file version %u, this maize reads %u", ver, MZ__LINK_VERSION);
  } else if (!fgets(line, sizeof line, fp) || !chomp(line) || strncmp(line, "src ", 4) || strlen(line + 4) >= namecap) {
    snprintf(err, errlen, "corrupt: no src line");
  } else if (snprintf(src, namecap, "%s", line + 4) < 0 || !fgets(line, sizeof line, fp) || !chomp(line) ||
             strncmp(line, "dst ", 4) || strlen(line + 4) >= namecap) {
    snprintf(err, errlen, "corrupt: no dst line");
  } else if (snprintf(dst, namecap, "%s", line + 4) < 0 || !fgets(line, sizeof line, fp) || !chomp(line) ||
             sscanf(line, "lat_ns %lg %c", lat, &extra) != 1 || !isfinite(*lat) || *lat < 0) {
    snprintf(err, errlen, "corrupt: bad lat_ns line");
  } else if (!fgets(line, sizeof line, fp) || !chomp(line) || sscanf(line, "ns_per_byte %lg %c", per_byte, &extra) != 1 ||
             !isfinite(*per_byte) || *per_byte < 0) {
    snprintf(err, errlen, "corrupt: bad ns_per_byte line");
  } else if (!fgets(line, sizeof line, fp) || !chomp(line) || strcmp(line, "end") || fgets(line, sizeof line, fp)) {
    snprintf(err, errlen, "corrupt: truncated or data after the end line");
  } else {
    rc = MZ_OK;
  }
  fclose(fp);
  return rc;
}

/* Atomic, as mz__pm_write: a temporary file, fsync, rename. */
static int link_write(const char *path, const char *src, const char *dst, const struct mz__link *l) {
  char tmp[4700];
  FILE *fp = atomic_open(path, tmp, sizeof tmp);
  if (!fp) return MZ_EIO;
  bool ok = fprintf(fp, "maize-link %d\nsrc %s\ndst %s\nlat_ns %.17g\nns_per_byte %.17g\nend\n", MZ__LINK_VERSION, src,
                    dst, l->lat, l->per_byte) > 0;
  return atomic_commit(fp, tmp, path, ok);
}

/* Time synchronous copies of a small and a large size into (to_dev) or out
 * of dev's memory; the minimum of a few repetitions of each, fitted to
 * lat + bytes * per_byte. */
static int link_measure(struct mz_device *dev, bool to_dev, struct mz__link *l) {
  /* The large copy outgrows a last-level cache (a 4 MiB one read 43 GB/s
   * on a 2-core EPYC whose copies in a run went at 7.7), unless the device
   * allocates less. */
  size_t small = 4096, large = 64u << 20;
  if (dev->info.max_alloc && large > dev->info.max_alloc / 2) large = (size_t)(dev->info.max_alloc / 2);
  if (large < 4u << 20) large = 4u << 20;
  if (!dev->ops->mem_alloc || !dev->ops->mem_free || !dev->ops->mem_read || !dev->ops->mem_write) return MZ_ENOTSUP;
  void *mem = NULL;
  char *host = malloc(large);
  int rc = host ? dev->ops->mem_alloc(dev, large, &mem) : MZ_ENOMEM;
  if (rc) {
    free(host);
    return rc;
  }
  memset(host, 1, large);
  double t[2] = {INFINITY, INFINITY};
  for (int rep = 0; rep < 12 && !rc; rep++) {
    size_t n = rep % 3 == 2 ? large : small; /* 8 small, 4 large, the first of each a warm-up */
    uint64_t t0 = mz__now_ns();
    rc = to_dev ? dev->ops->mem_write(dev, mem, host, n) : dev->ops->mem_read(dev, mem, host, n);
    double dt = (double)(mz__now_ns() - t0);
    if (rep >= 3 && dt < t[n == large]) t[n == large] = dt;
  }
  dev->ops->mem_free(dev, mem);
  free(host);
  if (rc) return rc;
  l->per_byte = (t[1] - t[0]) / (double)(large - small);
  if (!(l->per_byte > 0)) l->per_byte = t[1] / (double)large;
  l->lat = t[0] - l->per_byte * (double)small;
  if (l->lat < 0) l->lat = 0;
  return MZ_OK;
}

/* Load or measure one hop, saving a measurement. */
static void hop_settle(mz_runtime *rt, struct mz__perfmodel *pm, struct mz_device *dev, bool to_dev, bool dir_ok,
                       struct hop *h) {
  const char *src = to_dev ? "host" : dev->info.name, *dst = to_dev ? dev->info.name : "host";
  char path[4400], err[160], fs[MZ__PM_NAMELEN], fd[MZ__PM_NAMELEN];
  struct mz__link l;
  if (pm->persist) {
    link_path(path, sizeof path, pm->dir, src, dst);
    int rc = mz__link_read(path, fs, fd, sizeof fs, &l.lat, &l.per_byte, err, sizeof err);
    if (rc == MZ_OK && (strcmp(fs, src) || strcmp(fd, dst))) {
      rc = MZ_EINVAL;
      snprintf(err, sizeof err, "it holds another link");
    }
    if (rc == MZ_OK) {
      *h = (struct hop){l, LINK_MEASURED};
      return;
    }
    if (rc != MZ_ENOENT) mz__warn(rt, "link file '%s' is ignored (measured again): %s", path, err);
  }
  if (link_measure(dev, to_dev, &l)) return; /* the default stays */
  *h = (struct hop){l, LINK_MEASURED};
  if (dir_ok && link_write(path, src, dst, &l)) mz__warn(rt, "cannot write link file '%s'", path);
}

int mz_sched_measure_links(const mz_sched *s) {
  mz_runtime *rt = s->rt;
  struct mz__perfmodel *pm = rt->pm;
  if (!pm || atomic_load_explicit(&pm->links_settled, memory_order_acquire)) return MZ_OK;
  pthread_mutex_lock(&pm->link_lock);
  int rc = MZ_OK;
  if (!atomic_load_explicit(&pm->links_settled, memory_order_relaxed)) {
    bool changed = false, dir_ok = pm->persist && pm_mkdir(pm->dir) == MZ_OK;
    for (unsigned c = 0; c < pm->ncls; c++) {
      struct mz_device *d = pm->cls_dev[c];
      if (d->ops->host_memory || atomic_load(&d->dead)) continue;
      if (pm->hop_to[c].from == LINK_DEFAULT) {
        hop_settle(rt, pm, d, true, dir_ok, &pm->hop_to[c]);
        changed = true;
      }
      if (pm->hop_from[c].from == LINK_DEFAULT) {
        hop_settle(rt, pm, d, false, dir_ok, &pm->hop_from[c]);
        changed = true;
      }
    }
    if (changed) rc = links_publish(rt, pm);
    if (!rc) atomic_store_explicit(&pm->links_settled, true, memory_order_release);
  }
  pthread_mutex_unlock(&pm->link_lock);
  return rc;
}

/* Between memory nodes, as plan_exec moves data: directly between peers of
 * one backend, else through host memory. */
static double mem_link_ns(const mz_runtime *rt, unsigned src, unsigned dst, size_t bytes) {
  if (src == dst || !rt->pm) return 0;
  const struct mz__perfmodel *pm = rt->pm;
  const struct link_tab *t = atomic_load_explicit(&pm->links, memory_order_acquire);
  const struct mz__link *l = &t->v[pm->mem_row[src] * t->n + pm->mem_row[dst]];
  return l->lat + l->per_byte * (double)bytes;
}

double mz_sched_link_ns(const mz_sched *s, unsigned a, unsigned b, size_t bytes) {
  const mz_runtime *rt = s->rt;
  if (a >= rt->nq || b >= rt->nq) return 0;
  return mem_link_ns(rt, rt->queues[a]->dev->memnode, rt->queues[b]->dev->memnode, bytes);
}

/* Per memory node: the time to bring t's stale inputs there.  Per input,
 * the cost is computed once per row of the link table (host, then each
 * device class), then added to every memory node that lacks a copy. */
static void transfer_by_mem(const mz_runtime *rt, const mz_op *op, double *cost) {
  const struct mz__task *k = mz__op_t(op);
  unsigned nmem = rt->nmem;
  const struct mz__perfmodel *pm = rt->pm;
  for (unsigned m = 0; m < nmem; m++) cost[m] = 0;
  if (!pm) return;
  const struct link_tab *lt = atomic_load_explicit(&pm->links, memory_order_acquire);
  double rstack[64];
  double *row = lt->n <= 64 ? rstack : malloc(lt->n * sizeof *row);
  uint8_t stack[256];
  uint8_t *valid = nmem <= sizeof stack ? stack : malloc(nmem);
  if (!valid || !row) goto out;
  for (unsigned a = 0; a < k->nacc; a++) {
    if (!(mz__acc_mode(mz__task_access(k, a)) & 1)) continue;
    mz_buffer *b = mz__acc_buf(mz__task_access(k, a));
    mz__spin_lock(&b->lock);
    for (unsigned m = 0; m < nmem; m++) valid[m] = b->copies[m].state != MZ__INVALID;
    mz__spin_unlock(&b->lock);
    /* The source plan_exec would use: host memory first. */
    unsigned src = 0;
    if (!valid[0])
      for (unsigned m = 1; m < nmem && !src; m++)
        if (valid[m]) src = m;
    const struct mz__link *from = &lt->v[pm->mem_row[src] * lt->n];
    for (unsigned r = 0; r < lt->n; r++) row[r] = from[r].lat + from[r].per_byte * (double)b->bytes;
    for (unsigned m = 0; m < nmem; m++)
      if (!valid[m]) cost[m] += row[pm->mem_row[m]];
  }
out:
  if (valid != stack) free(valid);
  if (row != rstack) free(row);
}

void mz_task_transfer_ns_all(const mz_sched *s, const mz_task *t, double *out) {
  const mz_runtime *rt = s->rt;
  double stack[256];
  double *cost = rt->nmem <= 256 ? stack : malloc(rt->nmem * sizeof *cost);
  if (!cost) {
    for (unsigned q = 0; q < rt->nq; q++) out[q] = 0;
    return;
  }
  transfer_by_mem(rt, (const mz_op *)t, cost);
  for (unsigned q = 0; q < rt->nq; q++) out[q] = cost[rt->queues[q]->dev->memnode];
  if (cost != stack) free(cost);
}

double mz_task_transfer_ns(const mz_sched *s, const mz_task *t, unsigned q) {
  const mz_runtime *rt = s->rt;
  if (q >= rt->nq) return 0;
  const mz_op *op = (const mz_op *)t;
  unsigned m = rt->queues[q]->dev->memnode;
  double ns = 0;
  for (unsigned a = 0; a < mz__op_t(op)->nacc; a++) {
    if (!(mz__acc_mode(mz__task_access(mz__op_t(op), a)) & 1)) continue;
    mz_buffer *b = mz__acc_buf(mz__task_access(mz__op_t(op), a));
    mz__spin_lock(&b->lock);
    bool here = b->copies[m].state != MZ__INVALID;
    unsigned src = 0;
    if (!here && b->copies[0].state == MZ__INVALID)
      for (unsigned k = 1; k < rt->nmem && !src; k++)
        if (b->copies[k].state != MZ__INVALID) src = k;
    mz__spin_unlock(&b->lock);
    if (!here) ns += mem_link_ns(rt, src, m, b->bytes);
  }
  return ns;
}

/* A node's data, which its costs are computed from. */
size_t mz_task_bytes(const mz_task *t) {
  const struct mz__task *k = mz__task_of((const mz_op *)t);
  size_t n = 0;
  for (unsigned i = 0; i < k->nacc; i++) n += mz__acc_buf(mz__task_access(k, i))->bytes;
  return n;
}

size_t mz_task_bytes_on(const mz_sched *s, const mz_task *t, unsigned q) {
  if (q >= s->rt->nq) return 0;
  unsigned m = s->rt->queues[q]->dev->memnode;
  const struct mz__task *k = mz__task_of((const mz_op *)t);
  size_t n = 0;
  for (unsigned i = 0; i < k->nacc; i++) {
    mz_buffer *b = mz__acc_buf(mz__task_access(k, i));
    mz__spin_lock(&b->lock);
    if (b->copies[m].state != MZ__INVALID) n += b->bytes;
    mz__spin_unlock(&b->lock);
  }
  return n;
}

size_t mz_task_edge_bytes(const mz_task *t, unsigned i) {
  const struct mz__task *k = mz__task_of((const mz_op *)t);
  if (i >= k->npreds) return 0;
  const struct mz__task *p = mz__op_t(mz__task_preds(k)[i]);
  size_t n = 0;
  for (unsigned a = 0; a < k->nacc; a++) {
    if (!(mz__acc_mode(mz__task_access(k, a)) & 1)) continue;
    for (unsigned b = 0; b < p->nacc; b++)
      if (mz__acc_buf(mz__task_access(p, b)) == mz__acc_buf(mz__task_access(k, a)) && (mz__acc_mode(mz__task_access(p, b)) & 2)) {
        n += mz__acc_buf(mz__task_access(k, a))->bytes;
        break;
      }
  }
  return n;
}

static uint64_t queue_ready(const mz_runtime *rt, unsigned q, uint64_t now) {
  const struct mz__queue *Q = rt->queues[q];
  if (Q->dev->ops->queue_ready_ns) {
    uint64_t r = Q->dev->ops->queue_ready_ns(Q);
    return r > now ? r : now;
  }
  unsigned backlog = atomic_load_explicit(&Q->backlog, memory_order_relaxed);
  uint64_t ema = rt->pm ? atomic_load_explicit(&rt->pm->hot.qs[q].ema, memory_order_relaxed) : 0;
  return now + (uint64_t)backlog * ema;
}

uint64_t mz_sched_queue_ready_ns(const mz_sched *s, unsigned q) {
  const mz_runtime *rt = s->rt;
  uint64_t now = mz__runtime_clock(rt);
  return q < rt->nq ? queue_ready(rt, q, now) : now;
}

void mz_sched_queue_ready_ns_all(const mz_sched *s, uint64_t *out) {
  const mz_runtime *rt = s->rt;
  uint64_t now = mz__runtime_clock(rt);
  for (unsigned q = 0; q < rt->nq; q++) out[q] = queue_ready(rt, q, now);
}

unsigned mz_sched_queue_distance(const mz_sched *s, unsigned a, unsigned b) {
  const mz_runtime *rt = s->rt;
  if (a == b || a >= rt->nq || b >= rt->nq) return 0;
  const struct mz__queue *A = rt->queues[a], *B = rt->queues[b];
  if (A->dev != B->dev) return 8;
  return A->dev->ops->queue_distance ? A->dev->ops->queue_distance(A, B) : 1;
}

unsigned mz_sched_device_class(const mz_sched *s, unsigned dev) {
  const mz_runtime *rt = s->rt;
  return rt->pm && dev < rt->ndev ? rt->pm->dev_class[dev] : dev;
}
