/* maize-info: what maize sees on this machine (StarPU's
 * starpu_machine_display, clinfo, lstopo): the version, the devices with
 * their capabilities, queues and memory, the OpenCL ICD loader, drivers
 * and platforms and the CUDA driver library found (libs.c), the policies
 * with their descriptions, and where the perf models are kept.  --json prints the same
 * as one JSON object for scripts.  Devices come from $MZ_DEVICES (as any
 * runtime's do), else from every device found. */
#include <getopt.h>
#include <maize.h>
#include <maize/policy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libs.h"
#include "perfmodel.h"
#include "policy_table.h"

static void json_str(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

/* Trailing blanks in device names (the CPU's model string has some) are
 * not shown. */
static const char *trim(char *buf, size_t size, const char *s) {
  snprintf(buf, size, "%s", s ? s : "");
  size_t n = strlen(buf);
  while (n && buf[n - 1] == ' ') buf[--n] = 0;
  return buf;
}

static const char *describe(const char *name) {
  for (unsigned i = 0; mz__builtin_policies[i]; i++)
    if (!strcmp(mz__builtin_policies[i]->name, name)) return mz__builtin_policies[i]->description;
  return "";
}

static void usage(FILE *f) {
  fprintf(f, "usage: maize-info [--json]\n"
             "  list the devices maize finds (or $MZ_DEVICES selects), the OpenCL and\n"
             "  CUDA libraries found, the policies and where the perf models are kept\n"
             "  -j, --json     one JSON object instead of text\n"
             "  -h, --help     this text\n"
             "  -V, --version  the maize version\n");
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                            {"help", no_argument, NULL, 'h'},
                                            {"version", no_argument, NULL, 'V'},
                                            {NULL, 0, NULL, 0}};
  int c, json = 0;
  while ((c = getopt_long(argc, argv, "jhV", longopts, NULL)) != -1) {
    switch (c) {
    case 'j': json = 1; break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("maize-info %s\n", mz_version()); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    usage(stderr);
    return 2;
  }
  mz_runtime *rt;
  int rc = mz_runtime_create(NULL, &rt);
  if (rc) {
    fprintf(stderr, "maize-info: mz_runtime_create: %s (%s)\n", mz_err_name(rc), mz_strerror(rc));
    return 1;
  }
  char pmdir[4096], nb[256];
  mz__pm_dir(pmdir, sizeof pmdir);
  unsigned nd = mz_runtime_device_count(rt);
  static struct mzi_libs libs; /* large: off the stack */
  mzi_libs_read(&libs);
  if (json) {
    printf("{\n  \"version\": ");
    json_str(mz_version());
    printf(",\n  \"default_policy\": ");
    json_str(mz_runtime_policy(rt));
    printf(",\n  \"perfmodel_dir\": ");
    if (pmdir[0]) json_str(pmdir);
    else printf("null");
    printf(",\n  \"devices\": [");
  } else {
    printf("maize %s\n\ndevices (%u, %u queues):\n", mz_version(), nd, mz_runtime_queue_count(rt));
  }
  for (unsigned i = 0; i < nd; i++) {
    mz_device_info d;
    if (mz_device_get_info(mz_runtime_device(rt, i), &d)) continue;
    trim(nb, sizeof nb, d.name);
    if (json) {
      printf("%s\n    {\"index\": %u, \"kind\": ", i ? "," : "", d.index);
      json_str(mz_device_kind_name(d.kind));
      printf(", \"name\": ");
      json_str(nb);
      printf(", \"vendor\": ");
      json_str(d.vendor);
      printf(", \"version\": ");
      json_str(d.version);
      printf(", \"memory\": %llu, \"compute_units\": %u, \"numa_node\": %d, \"queues\": %u, "
             "\"first_queue\": %u, \"unified_memory\": %s, \"compute_capability\": \"%d.%d\", \"pci_bus_id\": ",
             (unsigned long long)d.memory, d.compute_units, d.numa_node, d.queues, d.first_queue,
             d.unified_memory ? "true" : "false", d.cc_major, d.cc_minor);
      json_str(d.pci_bus_id);
      printf(", \"max_work_group\": %zu, \"max_alloc\": %llu, \"local_memory\": %llu, \"fp64\": %s", d.max_work_group,
             (unsigned long long)d.max_alloc, (unsigned long long)d.local_memory, d.fp64 ? "true" : "false");
      printf(", \"dead\": %s}", mz_device_is_dead(mz_runtime_device(rt, i)) ? "true" : "false");
    } else {
      printf("  %u  %-7s %s (%s%s%s)\n", d.index, mz_device_kind_name(d.kind), nb, d.vendor ? d.vendor : "",
             d.version && d.version[0] ? ", " : "", d.version ? d.version : "");
      printf("       %u compute units, %.1f GiB %s memory, %u queue(s) from #%u, NUMA node %d", d.compute_units,
             (double)d.memory / (1u << 30), d.unified_memory ? "unified" : "device", d.queues, d.first_queue,
             d.numa_node);
      if (d.cc_major) printf(", compute capability %d.%d", d.cc_major, d.cc_minor);
      if (d.pci_bus_id[0]) printf(", PCI %s", d.pci_bus_id);
      printf("\n       largest buffer %.1f GiB, %s", (double)d.max_alloc / (1u << 30), d.fp64 ? "fp64" : "no fp64");
      if (d.max_work_group) printf(", work-groups up to %zu, %llu KiB local memory", d.max_work_group,
                                   (unsigned long long)(d.local_memory >> 10));
      printf("\n");
    }
  }
  if (json) {
    printf("\n  ],\n");
    mzi_libs_json(stdout, &libs);
    printf(",\n  \"policies\": [");
  } else {
    mzi_libs_text(stdout, &libs);
    printf("\npolicies (default %s):\n", mz_runtime_policy(rt));
  }
  const char *pn;
  for (unsigned i = 0; (pn = mz_policy_name(rt, i)); i++) {
    if (json) {
      printf("%s\n    {\"name\": ", i ? "," : "");
      json_str(pn);
      printf(", \"description\": ");
      json_str(describe(pn));
      printf("}");
    } else {
      printf("  %-12s %s\n", pn, describe(pn));
    }
  }
  if (json) printf("\n  ]\n}\n");
  else {
    printf("\nperf models: %s\n", pmdir[0] ? pmdir : "not kept (MZ_PERFMODEL_DIR=off)");
    if (pmdir[0] && mz__pm_print(stdout, pmdir) < 0) printf("  (none yet)\n");
  }
  mz_runtime_destroy(rt);
  return 0;
}
