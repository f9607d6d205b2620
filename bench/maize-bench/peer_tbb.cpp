/* Task Bench graphs on oneTBB's flow graph, a peer beside OpenMP and
 * StarPU.  Task Bench has no TBB implementation of its own; this one
 * follows the OpenMP peer (peer_openmp.c): one output array per (slot,
 * point) with `fields` slots per point, one node per task (timestep,
 * point).  Each task is a continue_node whose body checks its inputs and
 * runs the kernel (tb_execute_point); an edge from each input's node
 * orders it.  The timed region is building the nodes and edges, starting
 * the sources and wait_for_all(), as Task Bench times task creation and
 * execution.  Workers: a task_arena of that many threads.
 *
 * The output slots are reused only when fields < timesteps; the flow graph
 * would then need write-after-read edges that Task Bench's dependencies do
 * not give, so that case is refused (the default, fields = timesteps, and
 * every metg run have none). */
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/enumerable_thread_specific.h>

extern "C" {
#include "tb_systems.h"
}

namespace {

using node_t = oneapi::tbb::flow::continue_node<oneapi::tbb::flow::continue_msg>;

struct tbt {
  const tb_app *app;
  long workers;
  std::vector<std::vector<char>> out; /* per graph: fields * max_width * output_bytes */
  size_t scratch_bytes;
  long maxin;
  std::atomic<int> failed{0};
  char errmsg[512];
};

char *slot_of(tbt *o, int gi, long t, long p) {
  const tb_graph *g = &o->app->graphs[gi];
  return o->out[gi].data() + ((size_t)(t % g->fields) * (size_t)g->max_width + (size_t)p) * g->output_bytes;
}

uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void tbt_destroy(void *state) { delete static_cast<tbt *>(state); }

int tbt_create(const tb_app *app, const tb_sys_opts *opts, void **state, char *err, size_t errsz) {
  *state = nullptr;
  tbt *o = new (std::nothrow) tbt;
  if (!o) return std::snprintf(err, errsz, "tbb: out of memory"), -1;
  o->app = app;
  o->workers = opts->workers > 0 ? opts->workers : oneapi::tbb::info::default_concurrency();
  o->scratch_bytes = 0;
  o->maxin = 0;
  o->errmsg[0] = 0;
  o->out.resize((size_t)app->ngraphs);
  for (int gi = 0; gi < app->ngraphs; gi++) {
    const tb_graph *g = &app->graphs[gi];
    if (g->fields < g->timesteps) {
      std::snprintf(err, errsz, "tbb: -field %ld < -steps %ld would reuse output slots, which needs write-after-read "
                    "edges this peer does not add", g->fields, g->timesteps);
      delete o;
      return -2;
    }
    o->out[gi].assign((size_t)g->fields * (size_t)g->max_width * g->output_bytes, 0);
    if (g->scratch_bytes > o->scratch_bytes) o->scratch_bytes = g->scratch_bytes;
    if (tb_max_inputs(g) > o->maxin) o->maxin = tb_max_inputs(g);
  }
  *state = o;
  return 0;
}

int tbt_run(void *state, double *seconds, char *err, size_t errsz) {
  tbt *o = static_cast<tbt *>(state);
  const tb_app *app = o->app;
  o->failed.store(0);
  long maxsteps = 0;
  for (int gi = 0; gi < app->ngraphs; gi++)
    if (app->graphs[gi].timesteps > maxsteps) maxsteps = app->graphs[gi].timesteps;
  /* Scratch memory, one block per thread that runs tasks (memory_bound). */
  size_t stride = (o->scratch_bytes + 63) / 64 * 64;
  oneapi::tbb::enumerable_thread_specific<std::vector<char>> scratch([&] {
    std::vector<char> v(stride ? stride : 1);
    if (stride) tb_prepare_scratch(v.data(), stride);
    return v;
  });
  oneapi::tbb::task_arena arena((int)o->workers);
  uint64_t t0 = 0, t1 = 0;
  arena.execute([&] {
    t0 = now_ns();
    oneapi::tbb::flow::graph fg;
    std::vector<std::vector<node_t *>> prev((size_t)app->ngraphs), cur((size_t)app->ngraphs);
    std::vector<node_t *> sources;
    std::vector<long> in((size_t)(o->maxin > 0 ? o->maxin : 1));
    std::vector<std::unique_ptr<node_t>> nodes;
    for (int gi = 0; gi < app->ngraphs; gi++) {
      prev[gi].assign((size_t)app->graphs[gi].max_width, nullptr);
      cur[gi].assign((size_t)app->graphs[gi].max_width, nullptr);
    }
    for (long t = 0; t < maxsteps; t++)
      for (int gi = 0; gi < app->ngraphs; gi++) {
        const tb_graph *g = &app->graphs[gi];
        if (t >= g->timesteps) continue;
        long off = tb_offset_at(g, t), w = tb_width_at(g, t);
        for (long p = off; p < off + w; p++) {
          nodes.emplace_back(new node_t(fg, [o, gi, t, p, &scratch](const oneapi::tbb::flow::continue_msg &) {
            const tb_graph *tg = &o->app->graphs[gi];
            long inb[64];
            const void *ptrb[64];
            std::vector<long> inv;
            std::vector<const void *> ptrv;
            long *ins = inb;
            const void **ptr = ptrb;
            if (o->maxin > 64) {
              inv.resize((size_t)o->maxin);
              ptrv.resize((size_t)o->maxin);
              ins = inv.data();
              ptr = ptrv.data();
            }
            size_t n = tb_inputs(tg, t, p, ins);
            for (size_t k = 0; k < n; k++) ptr[k] = slot_of(o, gi, t - 1, ins[k]);
            char e[320];
            char *s = tg->scratch_bytes ? scratch.local().data() : nullptr;
            if (tb_execute_point(tg, t, p, slot_of(o, gi, t, p), tg->output_bytes, ptr, nullptr, n, s,
                                 tg->scratch_bytes, e, sizeof e)) {
              int expected = 0;
              if (o->failed.compare_exchange_strong(expected, 1))
                std::snprintf(o->errmsg, sizeof o->errmsg, "%s", e);
            }
          }));
          node_t *nd = nodes.back().get();
          size_t n = tb_inputs(g, t, p, in.data());
          for (size_t k = 0; k < n; k++) oneapi::tbb::flow::make_edge(*prev[gi][(size_t)in[k]], *nd);
          if (!n) sources.push_back(nd);
          cur[gi][(size_t)p] = nd;
        }
        std::swap(prev[gi], cur[gi]);
      }
    for (node_t *s : sources) s->try_put(oneapi::tbb::flow::continue_msg());
    fg.wait_for_all();
    t1 = now_ns();
  });
  *seconds = (double)(t1 - t0) * 1e-9;
  if (o->failed.load()) {
    std::snprintf(err, errsz, "input check failed: %s", o->errmsg);
    return -1;
  }
  return 0;
}

} // namespace

extern "C" const tb_system tb_system_tbb = {
    "tbb", 1, tbt_create, tbt_run, tbt_destroy,
};
