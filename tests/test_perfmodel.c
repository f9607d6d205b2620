/* Perf models: history fed by runs and kept on disk, estimates
 * seen by a policy in the next runtime, the fit in size for unseen sizes,
 * and the files' safety: a writer killed mid-write leaves the old or the
 * new file, a corrupt or foreign file is ignored, and two runtimes saving
 * the same model at once add up into a valid file; and the sampling: new
 * nodes of a saturated bucket are sampled one run in 16, not each, and a
 * node whose bucket settled meanwhile takes the longer period. */
#include <criterion/criterion.h>
#include <maize.h>
#include <maize/policy.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perfmodel.h"
#include "perfmodel_tick.h"

/* Every test has a deadline: one that hangs is reported by name
 * as timed out instead of blocking the suite (a test may set its own). */
TestSuite(perfmodel, .timeout = 120);

#define OK(rt, call)                                                                                 \
  do {                                                                                               \
    int rc_ = (call);                                                                                \
    cr_assert_eq(rc_, MZ_OK, "%s: %s (%s)", #call, mz_err_name(rc_), mz_runtime_last_error(rt));     \
  } while (0)

/* A fresh model directory per test. */
static char dir[256];
static void fresh_dir(const char *name) {
  snprintf(dir, sizeof dir, "/tmp/mz-test-perfmodel-%ld-%s", (long)getpid(), name);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
  setenv("MZ_PERFMODEL_DIR", dir, 1);
}

/* A policy that records what the model expects for each node on queue 1
 * (the first sim device) and puts it there. */
static double seen[64];
static _Atomic unsigned nseen;
static int probe_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)ready;
  unsigned i = atomic_fetch_add(&nseen, 1);
  if (i < 64) seen[i] = mz_task_expected_ns(s, t, 1);
  return 1;
}
static const struct mz_policy_ops probe = {.abi = MZ_POLICY_ABI, .name = "probe", .select = probe_select};

/* A kernel with no cost spec: the simulator runs it at one flop per
 * element (1000 elements at 1 GFLOP/s: 1000 ns) and does not tell the
 * policies, so they have only the perf model. */
static mz_runtime *pm_runtime(void) {
  mz_runtime *rt;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = "sim:d*1@speed=1", .quiet = true}, &rt);
  cr_assert_eq(rc, MZ_OK);
  OK(rt, mz_policy_register(rt, &probe));
  return rt;
}

/* n nodes of "touch" on u8 buffers of elems elements each. */
static void run_nodes(mz_runtime *rt, unsigned n, size_t elems) {
  mz_kernel *k;
  OK(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = "touch", .params = "inout u8[] a"}, &k));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_buffer *b;
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){elems}, NULL, &b));
  mz_op *last = mz_value(g, b);
  for (unsigned i = 0; i < n; i++) last = mz_unzip(g, mz_apply(g, k, last, NULL), 0);
  mz_future *f;
  OK(rt, mz_schedule(g, last, "probe", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
}

static void model_path(char *buf, size_t cap) { mz__pm_path(buf, cap, dir, "touch", "sim-d"); }

Test(perfmodel, learned_saved_and_reused) {
  fresh_dir("reuse");
  mz_runtime *rt = pm_runtime();
  atomic_store(&nseen, 0);
  run_nodes(rt, 5, 1000);
  /* Unsure until MZ_PERFMODEL_MIN_SAMPLES samples: the first node saw no
   * estimate; after three, the mean (1000 ns). */
  cr_expect_lt(seen[0], 0);
  mz_runtime_destroy(rt);
  char path[512], err[160];
  model_path(path, sizeof path);
  struct mz__pm_file f;
  cr_assert_eq(mz__pm_read(path, &f, err, sizeof err), MZ_OK, "%s: %s", path, err);
  cr_expect_str_eq(f.kernel, "touch");
  cr_expect_eq(f.nb, 1);
  cr_expect_eq(f.b[0].s.n, 5);
  cr_expect_float_eq(f.b[0].s.mean, 1000.0, 1e-9);
  mz__pm_file_free(&f);
  /* The next runtime starts calibrated. */
  rt = pm_runtime();
  atomic_store(&nseen, 0);
  run_nodes(rt, 1, 1000);
  cr_expect_float_eq(seen[0], 1000.0, 1e-6);
  mz_runtime_destroy(rt);
  cr_assert_eq(mz__pm_read(path, &f, err, sizeof err), MZ_OK);
  cr_expect_eq(f.b[0].s.n, 6);
  mz__pm_file_free(&f);
}

Test(perfmodel, fit_in_size) {
  fresh_dir("fit");
  mz_runtime *rt = pm_runtime();
  run_nodes(rt, 3, 1000);   /* 1000 ns */
  run_nodes(rt, 3, 16000);  /* 16000 ns */
  atomic_store(&nseen, 0);
  run_nodes(rt, 1, 4000);   /* never seen: the fit in log-log gives 4000 */
  cr_expect(seen[0] > 3900 && seen[0] < 4100, "estimate %g for 4000", seen[0]);
  mz_runtime_destroy(rt);
}

static void write_model(const char *path, uint64_t n) {
  struct mz__pm_file f = {0};
  snprintf(f.kernel, sizeof f.kernel, "touch");
  snprintf(f.device, sizeof f.device, "sim-d");
  /* Many buckets, so that a write takes a while. */
  for (int k = 0; k < 300; k++) {
    struct mz__pm_bucket *b = mz__pm_file_bucket(&f, k);
    b->s = (struct mz__pm_stat){.n = n, .mean = 1000.0 * (double)k + 1, .m2 = 1, .bytes = 100};
  }
  cr_assert_eq(mz__pm_write(path, &f), MZ_OK);
  mz__pm_file_free(&f);
}

Test(perfmodel, killed_writer_leaves_a_valid_file) {
  fresh_dir("kill");
  mkdir(dir, 0755);
  char path[512], err[160];
  model_path(path, sizeof path);
  write_model(path, 1);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  srand((unsigned)ts.tv_nsec);
  for (int round = 0; round < 40; round++) {
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
      for (uint64_t n = 2;; n++) write_model(path, n);
    }
    struct timespec d = {0, (long)(rand() % 3000) * 1000};
    nanosleep(&d, NULL);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    struct mz__pm_file f;
    cr_assert_eq(mz__pm_read(path, &f, err, sizeof err), MZ_OK, "round %d: %s", round, err);
    cr_assert_eq(f.nb, 300);
    for (unsigned k = 1; k < f.nb; k++) cr_assert_eq(f.b[k].s.n, f.b[0].s.n, "a mixed file");
    mz__pm_file_free(&f);
  }
}

Test(perfmodel, corrupt_and_foreign_files_are_ignored) {
  const char *bad[] = {"garbage\n", "maize-perfmodel 99\nkernel touch\ndevice sim-d\nend 0\n",
                       "maize-perfmodel 1\nkernel touch\ndevice sim-d\n0 3 1000", /* cut */
                       "maize-perfmodel 1\nkernel other\ndevice sim-d\nend 0\n"};
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    char name[16];
    snprintf(name, sizeof name, "bad%u", i);
    fresh_dir(name);
    mkdir(dir, 0755);
    char path[512], err[160];
    model_path(path, sizeof path);
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fputs(bad[i], fp);
    fclose(fp);
    mz_runtime *rt = pm_runtime();
    atomic_store(&nseen, 0);
    run_nodes(rt, 4, 1000);
    cr_expect_lt(seen[0], 0, "file %u was not ignored", i);
    mz_runtime_destroy(rt);
    /* Replaced by a valid model of this runtime's samples. */
    struct mz__pm_file f;
    cr_assert_eq(mz__pm_read(path, &f, err, sizeof err), MZ_OK, "%s", err);
    cr_expect_eq(f.b[0].s.n, 4);
    mz__pm_file_free(&f);
  }
}

static void *writer(void *arg) {
  (void)arg;
  mz_runtime *rt = pm_runtime();
  run_nodes(rt, 10, 1000);
  mz_runtime_destroy(rt);
  return NULL;
}

Test(perfmodel, concurrent_runtimes_add_up) {
  fresh_dir("concurrent");
  for (int round = 0; round < 5; round++) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, writer, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  }
  char path[512], err[160];
  model_path(path, sizeof path);
  struct mz__pm_file f;
  cr_assert_eq(mz__pm_read(path, &f, err, sizeof err), MZ_OK, "%s", err);
  cr_expect_eq(f.b[0].s.n, 5 * 4 * 10);
  cr_expect_float_eq(f.b[0].s.mean, 1000.0, 1e-9);
  mz__pm_file_free(&f);
}

/* The table command's printer reads what the runtime wrote. */
Test(perfmodel, table) {
  fresh_dir("table");
  mz_runtime *rt = pm_runtime();
  run_nodes(rt, 3, 1000);
  mz_runtime_destroy(rt);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cr_assert_eq(mz__pm_print(out, dir), 1);
  fclose(out);
  cr_expect(strstr(buf, "touch") && strstr(buf, "sim-d"), "%s", buf);
  free(buf);
  /* Filters: a kernel or device name part keeps its models, another none;
   * the columns stay aligned with the header. */
  buf = NULL;
  out = open_memstream(&buf, &len);
  cr_assert_eq(mz__pm_print_filtered(out, dir, "tou", "sim"), 1);
  cr_assert_eq(mz__pm_print_filtered(out, dir, "no-such-kernel", NULL), 0);
  cr_assert_eq(mz__pm_print_filtered(out, dir, NULL, "no-such-device"), 0);
  fclose(out);
  const char *row = strstr(buf, "\ntouch");
  cr_assert_not_null(row, "%s", buf);
  cr_expect_eq(strstr(buf, "device") - buf, strstr(row + 1, "sim-d") - (row + 1), "device column aligned:\n%s", buf);
  free(buf);
}

/* ---- transfer costs: links measured once per device pair and cached ---- */

/* A policy that makes the links measured (as dmda and heft do at init)
 * and records what a policy then sees: queue 0 is the host-only CPU worker
 * (host memory), queue 1 the first device. */
static double link0, link1m;
static int link_init(const mz_sched *s, void **state) {
  (void)state;
  return mz_sched_measure_links(s);
}
static int link_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)t;
  (void)ready;
  link0 = mz_sched_link_ns(s, 0, 1, 0);
  link1m = mz_sched_link_ns(s, 0, 1, 1u << 20);
  return 1;
}
static const struct mz_policy_ops link_probe = {
    .abi = MZ_POLICY_ABI, .name = "link-probe", .init = link_init, .select = link_select};

static double nop_cost(const mz_call *c) {
  (void)c;
  return 1000;
}

/* One tiny node on queue 1 under link-probe, so that its init and select
 * run.  Returns MZ_OK or the runtime's creation error (no such device). */
static int probe_links(const char *devices, char *devname, size_t cap) {
  link0 = link1m = -1;
  mz_runtime *rt;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true}, &rt);
  if (rc) return rc;
  OK(rt, mz_policy_register(rt, &link_probe));
  mz_device_info info;
  OK(rt, mz_device_get_info(mz_runtime_device(rt, 1), &info));
  if (devname) snprintf(devname, cap, "%s", info.name);
  /* A kernel every device can run: C for nobody, OpenCL text, a cost for
   * the simulator. */
  mz_kernel *k;
  OK(rt, mz_kernel_create(rt,
                          &(mz_kernel_spec){.name = "link_nop",
                                            .params = "inout f32[] x",
                                            .opencl = {.format = MZ_CODE_SOURCE,
                                                       .data = "__kernel void link_nop(__global float *x) {}"},
                                            .cost = {.flops = nop_cost}},
                          &k));
  mz_buffer *b;
  OK(rt, mz_buffer_create(rt, MZ_F32, 1, (size_t[]){16}, NULL, &b));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *op = mz_apply(g, k, mz_value(g, b), NULL);
  mz_future *f;
  OK(rt, mz_schedule(g, op, "link-probe", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  return MZ_OK;
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Simulated devices report their configured link and nothing is measured
 * or written: host to sim is lat + bytes / link. */
Test(perfmodel, sim_links_are_configured_not_measured) {
  fresh_dir("simlink");
  cr_assert_eq(probe_links("sim:d*1@link=2G/s,lat=5us", NULL, 0), MZ_OK);
  cr_expect_float_eq(link0, 5000.0, 1e-6);
  cr_expect_float_eq(link1m, 5000.0 + (double)(1u << 20) / 2.0, 1e-6);
  char path[512];
  snprintf(path, sizeof path, "%s/host@sim-d.link", dir);
  cr_expect(!exists(path), "a sim link was written");
}

/* A real device (PoCL's): each direction is measured once, saved as a
 * valid link file, loaded (not measured again) by the next runtime, and a
 * corrupt file is replaced by a new measurement. */
Test(perfmodel, device_links_measured_saved_and_reused) {
  fresh_dir("cllink");
  char name[256];
  int rc = probe_links("opencl:0", name, sizeof name);
  if (rc) cr_skip_test("no OpenCL device (%s)", mz_err_name(rc));
  char path[1024], back[1024], fs[256], fd[256], err[160];
  char san[256];
  size_t n = 0;
  for (const char *c = name; *c && n + 1 < sizeof san; c++) { /* as the runtime names files */
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
              *c == '_' || (*c == '.' && n > 0);
    san[n] = ok ? *c : '_';
    n++;
  }
  san[n] = 0;
  snprintf(path, sizeof path, "%s/host@%s.link", dir, san);
  snprintf(back, sizeof back, "%s/%s@host.link", dir, san);
  double lat, pb;
  cr_assert_eq(mz__link_read(path, fs, fd, sizeof fs, &lat, &pb, err, sizeof err), MZ_OK, "%s: %s", path, err);
  cr_expect_str_eq(fs, "host");
  cr_expect_str_eq(fd, name);
  cr_expect(lat >= 0 && pb > 0, "lat %g ns, %g ns/byte", lat, pb);
  cr_expect_eq(mz__link_read(back, fs, fd, sizeof fs, &lat, &pb, err, sizeof err), MZ_OK, "%s: %s", back, err);
  /* What the policy saw is the fit in that file. */
  cr_assert_eq(mz__link_read(path, fs, fd, sizeof fs, &lat, &pb, err, sizeof err), MZ_OK);
  cr_expect_float_eq(link0, lat, 1e-6 * lat + 1e-9);
  cr_expect_float_eq(link1m, lat + pb * (double)(1u << 20), 1e-6 * link1m);

  /* The table command lists the links. */
  char *txt = NULL;
  size_t tlen = 0;
  FILE *mem = open_memstream(&txt, &tlen);
  cr_assert(mem);
  mz__pm_print(mem, dir);
  fclose(mem);
  cr_expect(strstr(txt, "link from") && strstr(txt, name), "table:\n%s", txt);
  free(txt);

  /* Reused: a file saying 12.345678 ms and 0.5 ns/byte is what the next
   * runtime sees, and it is left as it is. */
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fprintf(f, "maize-link 2\nsrc host\ndst %s\nlat_ns 12345678\nns_per_byte 0.5\nend\n", name);
  fclose(f);
  cr_assert_eq(probe_links("opencl:0", NULL, 0), MZ_OK);
  cr_expect_float_eq(link0, 12345678.0, 1e-3);
  cr_expect_float_eq(link1m, 12345678.0 + 0.5 * (double)(1u << 20), 1e-3);
  cr_assert_eq(mz__link_read(path, fs, fd, sizeof fs, &lat, &pb, err, sizeof err), MZ_OK);
  cr_expect_float_eq(lat, 12345678.0, 1e-3);

  /* Corrupt: ignored, measured again, and replaced by a valid file. */
  f = fopen(path, "w");
  cr_assert(f);
  fprintf(f, "maize-link 2\nsrc host\ndst %s\nlat_ns banana\n", name);
  fclose(f);
  cr_assert_eq(probe_links("opencl:0", NULL, 0), MZ_OK);
  cr_expect(link0 >= 0 && link0 < 12345678.0);
  cr_expect_eq(mz__link_read(path, fs, fd, sizeof fs, &lat, &pb, err, sizeof err), MZ_OK, "%s", err);
}

/* ---- host nodes: one model per name ---- */

static int host_nap(const mz_call *c) {
  (void)c;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
  nanosleep(&ts, NULL);
  return 0;
}

/* Named host nodes (mz_host_named) learn a model each; unnamed ones share
 * "host".  Their names reach the run's timings too. */
Test(perfmodel, host_nodes_are_modelled_by_name) {
  fresh_dir("host");
  mz_runtime *rt = NULL;
  OK(rt, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .quiet = true, .timings = true}, &rt));
  mz_device_info info;
  OK(rt, mz_device_get_info(mz_runtime_device(rt, 0), &info));
  char devname[128]; /* info's strings go with the runtime */
  snprintf(devname, sizeof devname, "%s", info.name);
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_buffer *b;
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){16}, NULL, &b));
  mz_op *last = mz_value(g, b);
  const char *names[] = {"fill stage", "verify stage", NULL};
  for (int rep = 0; rep < 4; rep++)
    for (int i = 0; i < 3; i++) last = mz_unzip(g, mz_host_named(g, names[i], host_nap, NULL, last), 0);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  OK(rt, mz_schedule(g, last, "eager", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  const mz_node_timing *tm = NULL;
  size_t nt = 0;
  OK(rt, mz_future_timings(f, &tm, &nt));
  cr_assert_eq(nt, 12);
  for (size_t i = 0; i < nt; i++) {
    const char *want = names[i % 3] ? names[i % 3] : "host";
    cr_expect_str_eq(tm[i].name, want, "node %zu", i);
  }
  mz_future_destroy(f);
  /* Too long a name is refused on the graph, with a message. */
  char longname[300];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  mz_graph *g2;
  OK(rt, mz_graph_create(rt, &g2));
  mz_op *bad = mz_host_named(g2, longname, host_nap, NULL, NULL);
  cr_assert_not_null(bad);
  cr_expect_eq(mz_graph_status(g2), MZ_EINVAL);
  cr_expect(strstr(mz_graph_message(g2), "longer than"), "%s", mz_graph_message(g2));
  mz_graph_destroy(g2);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_runtime_destroy(rt); /* saves the models */
  for (int i = 0; i < 3; i++) {
    char path[512], err[160];
    mz__pm_path(path, sizeof path, dir, names[i] ? names[i] : "host", devname);
    struct mz__pm_file pf;
    cr_assert_eq(mz__pm_read(path, &pf, err, sizeof err), MZ_OK, "%s: %s", path, err);
    cr_expect_str_eq(pf.kernel, names[i] ? names[i] : "host");
    uint64_t n = 0;
    for (unsigned k = 0; k < pf.nb; k++) n += pf.b[k].s.n;
    cr_expect_eq(n, 4, "%s: %llu samples", pf.kernel, (unsigned long long)n);
    mz__pm_file_free(&pf);
  }
}

static int empty_touch(const mz_call *c) {
  (void)c;
  return 0;
}

/* A node's run is a perf-model sample until its size bucket on the device
 * is saturated (MZ__PM_SATURATED samples), then one run in 16 on its
 * queue; a new node of that kernel and bucket takes that verdict where it
 * runs (it is not a sample of its own), in the graph that saturated the
 * bucket and in a new one.  1,900 new nodes on one worker: 256 samples,
 * then one in 16 of the other 1,644 (about 103). */
Test(perfmodel, new_nodes_of_a_saturated_bucket_are_sampled_one_in_16) {
  fresh_dir("saturated");
  mz_runtime *rt = NULL;
  OK(rt, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .quiet = true}, &rt));
  mz_device_info info;
  OK(rt, mz_device_get_info(mz_runtime_device(rt, 0), &info));
  char devname[128];
  snprintf(devname, sizeof devname, "%s", info.name);
  mz_kernel *k = NULL;
  OK(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = "sat", .params = "inout u8[] b", .cpu = {empty_touch, NULL}}, &k));
  mz_buffer *b[64];
  for (int i = 0; i < 64; i++) OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){64}, NULL, &b[i]));
  for (int part = 0; part < 2; part++) {
    mz_graph *g;
    OK(rt, mz_graph_create(rt, &g));
    unsigned n = part ? 1600 : 300;
    mz_op *ops[1600];
    for (unsigned i = 0; i < n; i++) ops[i] = mz_apply(g, k, mz_value(g, b[i % 64]), NULL);
    mz_op *root = mz_join(g, n, ops);
    cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
    mz_future *f;
    OK(rt, mz_schedule(g, root, "eager", &f));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
    mz_future_destroy(f);
    mz_graph_destroy(g);
  }
  for (int i = 0; i < 64; i++) mz_buffer_release(b[i]);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt); /* saves the model */
  char path[512], err[160];
  mz__pm_path(path, sizeof path, dir, "sat", devname);
  struct mz__pm_file pf;
  cr_assert_eq(mz__pm_read(path, &pf, err, sizeof err), MZ_OK, "%s: %s", path, err);
  uint64_t n = 0;
  for (unsigned i = 0; i < pf.nb; i++) n += pf.b[i].s.n;
  mz__pm_file_free(&pf);
  cr_expect(n >= 256 + 95 && n <= 256 + 115, "%llu samples of 1,900 nodes, expected 256 + about 103",
            (unsigned long long)n);
}

/* The rule of mz__pm_due for a node that has a verdict: a tick its period
 * does not divide is no sample and changes nothing; on a due tick, the
 * node takes the period its queue's last sample of the same kernel,
 * bucket and device found (the bucket settled meanwhile: one in 128), and
 * is a sample only if that period divides the tick too; a queue whose
 * last sample was of another kernel leaves the node's period as it was.
 * On two workers a node reaches a due tick of its old period at random,
 * and without the second rule nodes kept one in 16 long after their
 * bucket settled (one sample in 20 after 60 re-runs of 20,000). */
Test(perfmodel, a_node_due_by_its_period_takes_its_settled_buckets_longer_one) {
  static const int kern_a = 1, kern_b = 2; /* stand-ins: the rule compares kernel addresses only */
  struct mz__pm_queue pq;
  memset(&pq, 0, sizeof pq);
  unsigned char tb[sizeof(mz_op) + sizeof(struct mz__task)] __attribute__((aligned(64)));
  memset(tb, 0, sizeof tb);
  mz_op *op = (mz_op *)(void *)tb;
  struct mz__task *t = mz__task_of(op); /* (a task follows its op, which holds its kernel) */
  op->u.kernel = (mz_kernel *)(uintptr_t)&kern_a;
  op->pm_key1 = 3;
  t->pm_sat1 = 1;   /* a verdict on the device of index 0 ... */
  t->pm_mask = 15;  /* ... of one run in 16 */
  atomic_store(&pq.sat_kernel, (const void *)&kern_a);
  atomic_store(&pq.sat_key1, 3);
  atomic_store(&pq.sat_dev1, 1);
  atomic_store(&pq.sat_mask, 127);
  uint32_t tick;
  atomic_store(&pq.tick, 5);
  cr_expect_eq(mz__pm_due(&pq, t, 1, &tick), 0, "tick 5 is not due in 16");
  cr_expect_eq(tick, 5);
  cr_expect_eq(t->pm_mask, 15, "no change off a due tick");
  cr_expect_eq(atomic_load(&pq.tick), 6, "the tick advances");
  atomic_store(&pq.tick, 16);
  cr_expect_eq(mz__pm_due(&pq, t, 1, &tick), 0, "tick 16: due in 16, not in 128");
  cr_expect_eq(t->pm_mask, 127, "the settled bucket's period taken");
  atomic_store(&pq.tick, 128);
  cr_expect_eq(mz__pm_due(&pq, t, 1, &tick), 1, "tick 128 is a sample");
  /* A queue whose last sample was another kernel's: the node's own period. */
  t->pm_mask = 15;
  atomic_store(&pq.sat_kernel, (const void *)&kern_b);
  atomic_store(&pq.tick, 32);
  cr_expect_eq(mz__pm_due(&pq, t, 1, &tick), 1, "tick 32 is due in 16");
  cr_expect_eq(t->pm_mask, 15);
  /* Never a shorter period: the queue's verdict of a bucket not settled. */
  t->pm_mask = 127;
  atomic_store(&pq.sat_kernel, (const void *)&kern_a);
  atomic_store(&pq.sat_mask, 15);
  atomic_store(&pq.tick, 256);
  cr_expect_eq(mz__pm_due(&pq, t, 1, &tick), 1);
  cr_expect_eq(t->pm_mask, 127);
  /* New on another device (no verdict there): mz__perfmodel_due_new decides. */
  atomic_store(&pq.tick, 7);
  cr_expect_eq(mz__pm_due(&pq, t, 2, &tick), -1);
  cr_expect_eq(t->pm_sat1, 1);
}
