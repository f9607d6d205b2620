/* maize internals: perf model files (src/perfmodel.c), for the runtime,
 * the maize-perfmodel command and the tests.
 *
 * One file per (kernel name, device name) under the model directory:
 * $MZ_PERFMODEL_DIR, else $XDG_CACHE_HOME/maize, else ~/.cache/maize
 * ("off" as MZ_PERFMODEL_DIR keeps models in memory only).  The format is
 * text, versioned by its first line:
 *
 *   maize-perfmodel 1
 *   kernel <name>
 *   device <name>
 *   <bucket> <count> <mean ns> <M2 ns^2> <mean bytes>     one line per size bucket
 *   end <number of bucket lines>
 *
 * A bucket is a quarter octave of the node's buffer footprint (4 * log2).
 * Files are replaced atomically (a temporary file, fsync, rename) under an
 * flock on "<file>.lock", merging what other processes saved since this
 * one read the file, so a crash leaves the old or the new file and
 * concurrent writers lose nothing. */
#ifndef MZ_PERFMODEL_H
#define MZ_PERFMODEL_H

#include <stdint.h>
#include <stdio.h>

#include "maize.h"

#define MZ__PM_VERSION 1
#define MZ__PM_NAMELEN 256

/* Count, mean and sum of squared deviations (Welford), and the mean
 * footprint in bytes of the samples. */
struct mz__pm_stat {
  uint64_t n;
  double mean, m2, bytes;
};

struct mz__pm_bucket {
  int key;
  struct mz__pm_stat s;
  /* The mean that last moved the runtime's plan epoch (rt->plan_epoch,
   * src/perfmodel.c), 0: none yet; not in the file. */
  double said;
};

/* A model as a file holds it.  Buckets are sorted by key. */
struct mz__pm_file {
  char kernel[MZ__PM_NAMELEN], device[MZ__PM_NAMELEN];
  unsigned nb, capb;
  struct mz__pm_bucket *b;
};

/* The bucket of a footprint. */
int mz__pm_bucket_of(uint64_t bytes);

/* Add b into a (parallel Welford). */
void mz__pm_stat_merge(struct mz__pm_stat *a, const struct mz__pm_stat *b);

/* The bucket with key in f, created (zeroed) when missing; NULL on ENOMEM. */
struct mz__pm_bucket *mz__pm_file_bucket(struct mz__pm_file *f, int key);

/* Read a model file into *f (zeroed first; free with mz__pm_file_free).
 * Returns 0, MZ_ENOENT when there is no file, MZ_EIO when it cannot be
 * read, or MZ_EINVAL when it is corrupt or foreign (err says why); on
 * failure *f is left empty. */
int mz__pm_read(const char *path, struct mz__pm_file *f, char *err, size_t errlen);

/* Write f to path atomically (temporary file in the same directory, fsync,
 * rename).  Returns 0 or MZ_EIO; on failure the old file is untouched. */
int mz__pm_write(const char *path, const struct mz__pm_file *f);

void mz__pm_file_free(struct mz__pm_file *f);

/* The model directory from the environment into buf ("" when models are
 * not kept on disk).  Returns buf. */
char *mz__pm_dir(char *buf, size_t cap);

/* The file of (kernel, device) in dir, into buf. */
void mz__pm_path(char *buf, size_t cap, const char *dir, const char *kernel, const char *device);

/* Print every model in dir as a table, then every link file (transfer
 * costs) as a second one, each column as wide as its longest name.
 * Returns the number of models, or a negative code when dir cannot be
 * read.  The filtered form prints only the models whose kernel and device
 * names contain kernel and device (NULL or "": any), and the links with
 * that device at either end (none when a kernel is asked for); files that
 * cannot be read are then not listed. */
int mz__pm_print(FILE *out, const char *dir);
int mz__pm_print_filtered(FILE *out, const char *dir, const char *kernel, const char *device);

/* Link files (transfer costs, src/perfmodel.c): "<src>@<dst>.link" in the
 * model directory, "host" naming host memory:
 *
 *   maize-link 2
 *   src <name>
 *   dst <name>
 *   lat_ns <ns>
 *   ns_per_byte <ns>
 *   end
 *
 * Read one into the out-parameters (names up to namecap bytes).  Returns 0,
 * MZ_ENOENT, MZ_EIO, or MZ_EINVAL when corrupt or foreign (err says why). */
int mz__link_read(const char *path, char *src, char *dst, size_t namecap, double *lat, double *per_byte, char *err,
                  size_t errlen);

struct mz_op;
struct mz_device;
struct mz__pm_queue;

/* Performance models and the runtime clock (src/perfmodel.c).
 * create runs once the devices are known; destroy saves what was learned
 * and frees it (NULL-safe).  record is the completion path's feed: a node
 * ran ns on dev; chosen: the node was chosen as a sample before it ran
 * (else record decides whether to keep it).  Thread: any; the models have
 * their own lock.
 *
 * Before a CPU node of a run that is not timed (struct mz__run.timed)
 * runs on queue q of dev, its worker asks whether to time it as a sample:
 * mz__pm_due (perfmodel_tick.h, inline) answers for a node with a verdict
 * on dev, and advances q's tick, so it is asked once per node, from the
 * thread that runs q's nodes; mz__perfmodel_due_new answers for the others
 * (new, or moved), with the tick it read, from q's line pq. */
bool mz__perfmodel_due_new(struct mz__pm_queue *pq, const struct mz_op *op, const struct mz_device *dev,
                           uint32_t tick);
int mz__perfmodel_create(mz_runtime *rt);
void mz__perfmodel_destroy(mz_runtime *rt);
void mz__perfmodel_record(mz_runtime *rt, const struct mz_op *op, const struct mz_device *dev, unsigned q, uint64_t ns,
                          bool chosen);
/* The runtime clock: the first virtual-clock device's, else mz__now_ns(). */
uint64_t mz__runtime_clock(const mz_runtime *rt);


#endif
