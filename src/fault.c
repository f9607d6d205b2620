/* Fault injection: MZ_FAULTS, the test API, and the hooks the
 * core calls while planning and submitting.  See src/fault.h for the
 * semantics.  Everything here runs only when rt->faults is set, a device
 * is dead, or memory limits are on (src/memlimit.c); the core tests those
 * before calling in. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "fault.h"
#include "objects/mz_buffer.h"
#include "objects/mz_runtime.h"

struct mz__faults {
  uint64_t at[MZ__FAULT_KINDS];           /* the index that fails, 0: off */
  _Atomic uint64_t count[MZ__FAULT_KINDS];
  _Atomic uint64_t fired[MZ__FAULT_KINDS + 1]; /* [KINDS]: devices killed */
  unsigned ndev;
  uint64_t *kill_after;                   /* per device, 0: never */
  _Atomic uint64_t *devops;               /* per device: ops planned on it */
};

static struct mz__faults *faults_get(mz_runtime *rt) {
  if (rt->faults) return rt->faults;
  struct mz__faults *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->ndev = rt->ndev;
  f->kill_after = calloc(rt->ndev ? rt->ndev : 1, sizeof *f->kill_after);
  f->devops = calloc(rt->ndev ? rt->ndev : 1, sizeof *f->devops);
  if (!f->kill_after || !f->devops) {
    free(f->kill_after);
    free((void *)f->devops);
    free(f);
    return NULL;
  }
  rt->faults = f;
  return f;
}

static void faults_reset(struct mz__faults *f) {
  for (unsigned k = 0; k < MZ__FAULT_KINDS; k++) {
    f->at[k] = 0;
    atomic_store(&f->count[k], 0);
    atomic_store(&f->fired[k], 0);
  }
  atomic_store(&f->fired[MZ__FAULT_KINDS], 0);
  for (unsigned d = 0; d < f->ndev; d++) {
    f->kill_after[d] = 0;
    atomic_store(&f->devops[d], 0);
  }
}

static const char *const kind_names[MZ__FAULT_KINDS] = {"alloc", "enqueue", "transfer", "kernel"};

/* "cl0", "opencl1", "sim3", "cpu0", "cuda0" or "2" into a device index. */
static int parse_device(const mz_runtime *rt, const char *s, size_t n, unsigned *out) {
  size_t k = 0;
  while (k < n && isalpha((unsigned char)s[k])) k++;
  if (k == n || k + 6 < n) return -1;
  for (size_t i = k; i < n; i++)
    if (!isdigit((unsigned char)s[i])) return -1;
  unsigned idx = (unsigned)strtoul(s + k, NULL, 10);
  if (k == 0) {
    if (idx >= rt->ndev) return -1;
    *out = idx;
    return 0;
  }
  int kind = -1;
  if (k == 3 && !strncmp(s, "cpu", 3)) kind = MZ_DEVICE_CPU;
  else if ((k == 2 && !strncmp(s, "cl", 2)) || (k == 6 && !strncmp(s, "opencl", 6))) kind = MZ_DEVICE_OPENCL;
  else if (k == 4 && !strncmp(s, "cuda", 4)) kind = MZ_DEVICE_CUDA;
  else if (k == 3 && !strncmp(s, "sim", 3)) kind = MZ_DEVICE_SIM;
  if (kind < 0) return -1;
  for (unsigned d = 0, seen = 0; d < rt->ndev; d++) {
    if ((int)rt->devs[d]->info.kind != kind) continue;
    if (seen++ == idx) {
      *out = d;
      return 0;
    }
  }
  return -1;
}

static bool parse_index(const char *s, size_t n, uint64_t *out) {
  if (!n || n > 18) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return false;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  *out = v;
  return v >= 1;
}

int mz__faults_set(mz_runtime *rt, const char *spec) {
  if (!rt) return MZ_EINVAL;
  uint64_t at[MZ__FAULT_KINDS] = {0};
  uint64_t *kill = calloc(rt->ndev ? rt->ndev : 1, sizeof *kill);
  if (!kill) return MZ_ENOMEM;
  const char *s = spec ? spec : "";
  while (*s) {
    while (*s == ' ' || *s == ',') s++;
    if (!*s) break;
    size_t n = strcspn(s, ",");
    while (n && s[n - 1] == ' ') n--;
    const char *colon = memchr(s, ':', n);
    bool ok = colon != NULL;
    size_t kl = ok ? (size_t)(colon - s) : 0;
    const char *v = ok ? colon + 1 : NULL;
    size_t vl = ok ? n - kl - 1 : 0;
    if (ok && kl == 4 && !strncmp(s, "dead", 4)) {
      const char *at_sign = memchr(v, '@', vl);
      unsigned dev = 0;
      uint64_t k = 0;
      ok = at_sign && !parse_device(rt, v, (size_t)(at_sign - v), &dev) &&
           parse_index(at_sign + 1, vl - (size_t)(at_sign - v) - 1, &k);
      if (ok) kill[dev] = k;
    } else if (ok) {
      unsigned kind = MZ__FAULT_KINDS;
      for (unsigned i = 0; i < MZ__FAULT_KINDS; i++)
        if (strlen(kind_names[i]) == kl && !strncmp(s, kind_names[i], kl)) kind = i;
      uint64_t k = 0;
      ok = kind < MZ__FAULT_KINDS && parse_index(v, vl, &k);
      if (ok) at[kind] = k;
    }
    if (!ok) {
      free(kill);
      return mz__set_error(rt, MZ_EINVAL,
                           "MZ_FAULTS: cannot read '%.*s' (items: alloc:K, enqueue:K, transfer:K, kernel:K, "
                           "dead:DEV@K with DEV like cpu0, cl0, cuda0, sim1 or a device index; K >= 1)",
                           (int)n, s);
    }
    s += n;
    while (*s && *s != ',') s++;
  }
  bool any = false;
  for (unsigned k = 0; k < MZ__FAULT_KINDS; k++) any |= at[k] != 0;
  for (unsigned d = 0; d < rt->ndev; d++) any |= kill[d] != 0;
  if (!any && !rt->faults) {
    free(kill);
    return MZ_OK;
  }
  struct mz__faults *f = faults_get(rt);
  if (!f) {
    free(kill);
    return MZ_ENOMEM;
  }
  faults_reset(f);
  for (unsigned k = 0; k < MZ__FAULT_KINDS; k++) f->at[k] = at[k];
  for (unsigned d = 0; d < f->ndev; d++) f->kill_after[d] = kill[d];
  free(kill);
  return MZ_OK;
}

int mz__fault_arm(mz_runtime *rt, enum mz__fault_kind kind, uint64_t k) {
  if (!rt || kind >= MZ__FAULT_KINDS) return MZ_EINVAL;
  struct mz__faults *f = faults_get(rt);
  if (!f) return MZ_ENOMEM;
  f->at[kind] = k;
  atomic_store(&f->count[kind], 0);
  atomic_store(&f->fired[kind], 0);
  return MZ_OK;
}

int mz__fault_kill(mz_runtime *rt, unsigned dev, uint64_t k) {
  if (!rt || dev >= rt->ndev) return MZ_EINVAL;
  struct mz__faults *f = faults_get(rt);
  if (!f) return MZ_ENOMEM;
  f->kill_after[dev] = k;
  atomic_store(&f->devops[dev], 0);
  return MZ_OK;
}

uint64_t mz__fault_count(const mz_runtime *rt, enum mz__fault_kind kind) {
  return rt && rt->faults && kind < MZ__FAULT_KINDS ? atomic_load(&rt->faults->count[kind]) : 0;
}

uint64_t mz__fault_fired(const mz_runtime *rt, enum mz__fault_kind kind) {
  return rt && rt->faults && kind <= MZ__FAULT_KINDS ? atomic_load(&rt->faults->fired[kind]) : 0;
}

void mz__fault_revive(mz_runtime *rt, unsigned dev) {
  if (rt && dev < rt->ndev && atomic_exchange(&rt->devs[dev]->dead, false)) { /* plans may use it again */
    atomic_fetch_add_explicit(&rt->plan_epoch, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rt->dev_epoch, 1, memory_order_relaxed);
  }
}

int mz__fault_init(mz_runtime *rt) {
  const char *e = getenv("MZ_FAULTS");
  return e && *e ? mz__faults_set(rt, e) : MZ_OK;
}

void mz__fault_fini(mz_runtime *rt) {
  struct mz__faults *f = rt->faults;
  if (f) {
    free(f->kill_after);
    free((void *)f->devops);
    free(f);
    rt->faults = NULL;
  }
}

bool mz__fault_hit(mz_runtime *rt, enum mz__fault_kind kind) {
  struct mz__faults *f = rt->faults;
  if (!f) return false;
  uint64_t n = atomic_fetch_add_explicit(&f->count[kind], 1, memory_order_relaxed) + 1;
  if (n != f->at[kind]) return false;
  atomic_fetch_add(&f->fired[kind], 1);
  return true;
}

bool mz__fault_host_transfer(mz_runtime *rt, mz_buffer *b) {
  mz__spin_lock(&b->lock);
  bool stale = b->copies[0].state == MZ__INVALID;
  mz__spin_unlock(&b->lock);
  return stale && mz__fault_hit(rt, MZ__FAULT_TRANSFER);
}

void mz__fault_device_op(mz_runtime *rt, struct mz_device *dev) {
  struct mz__faults *f = rt->faults;
  if (!f->kill_after[dev->info.index]) return;
  uint64_t n = atomic_fetch_add_explicit(&f->devops[dev->info.index], 1, memory_order_relaxed) + 1;
  if (n == f->kill_after[dev->info.index]) {
    atomic_fetch_add(&f->fired[MZ__FAULT_KINDS], 1);
    mz__device_fail(dev, MZ_EDEVICE, "injected fault (MZ_FAULTS dead)");
  }
}
