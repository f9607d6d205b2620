/* maize-info: the OpenCL and CUDA libraries this process found, with paths
 * and versions, so that "no OpenCL device" or "no CUDA device" can be
 * traced to a missing loader, ICD or driver (clinfo and nvidia-smi answer
 * the same questions for their own stacks).
 *
 * Called after the runtime was created: its OpenCL discovery has made the
 * ICD loader load every installable client driver it could, so a driver
 * that is not in the process now failed to load.  The CUDA driver is
 * opened here as the CUDA backend opens it ($MZ_CUDA_LIBRARY, else
 * libcuda.so.1); only cuDriverGetVersion is called, never cuInit. */
#include "libs.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "mz_config.h"

#if MZ_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#endif

/* The file a loaded library came from, its links resolved (the name then
 * carries the version: libpocl.so.2.10.0); "" when unknown. */
static void loaded_path(void *handle, char *out, size_t cap) {
  struct link_map *lm = NULL;
  out[0] = 0;
  if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &lm) || !lm || !lm->l_name) return;
  char real[PATH_MAX];
  snprintf(out, cap, "%s", realpath(lm->l_name, real) ? real : lm->l_name);
}

static int cmp_icd(const void *a, const void *b) {
  return strcmp(((const struct mzi_icd *)a)->file, ((const struct mzi_icd *)b)->file);
}

static void read_icds(struct mzi_libs *L) {
  /* ocl-icd reads $OCL_ICD_VENDORS when it names a folder, else
   * /etc/OpenCL/vendors (a file there is one ICD). */
  const char *env = getenv("OCL_ICD_VENDORS");
  snprintf(L->icd_dir, sizeof L->icd_dir, "%s", env && *env ? env : "/etc/OpenCL/vendors");
  DIR *d = opendir(L->icd_dir);
  if (!d) {
    snprintf(L->icd_error, sizeof L->icd_error, "%s", strerror(errno));
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL && L->nicds < MZI_MAX_ICDS) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".icd")) continue;
    struct mzi_icd *icd = &L->icds[L->nicds++];
    memset(icd, 0, sizeof *icd);
    snprintf(icd->file, sizeof icd->file, "%s", e->d_name);
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/%s", L->icd_dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (f) {
      if (fgets(icd->library, sizeof icd->library, f)) icd->library[strcspn(icd->library, "\r\n")] = 0;
      fclose(f);
    }
    /* Loaded by the ICD loader during discovery, or it failed to load. */
    void *h = icd->library[0] ? dlopen(icd->library, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    if (h) {
      loaded_path(h, icd->path, sizeof icd->path);
      icd->loaded = true;
      dlclose(h);
    }
  }
  closedir(d);
  qsort(L->icds, L->nicds, sizeof *L->icds, cmp_icd);
}

#if MZ_HAVE_OPENCL
static void read_opencl(struct mzi_libs *L) {
  L->opencl_built = true;
  Dl_info di;
  if (dladdr((void *)(uintptr_t)&clGetPlatformIDs, &di) && di.dli_fname) {
    char real[PATH_MAX];
    snprintf(L->loader, sizeof L->loader, "%s", realpath(di.dli_fname, real) ? real : di.dli_fname);
  }
  read_icds(L);
  cl_platform_id ids[MZI_MAX_PLATFORMS];
  cl_uint n = 0;
  if (clGetPlatformIDs(MZI_MAX_PLATFORMS, ids, &n) != CL_SUCCESS) n = 0;
  for (cl_uint i = 0; i < n && i < MZI_MAX_PLATFORMS; i++) {
    struct mzi_platform *p = &L->platforms[L->nplatforms++];
    memset(p, 0, sizeof *p);
    clGetPlatformInfo(ids[i], CL_PLATFORM_NAME, sizeof p->name - 1, p->name, NULL);
    clGetPlatformInfo(ids[i], CL_PLATFORM_VENDOR, sizeof p->vendor - 1, p->vendor, NULL);
    clGetPlatformInfo(ids[i], CL_PLATFORM_VERSION, sizeof p->version - 1, p->version, NULL);
    cl_uint nd = 0;
    if (clGetDeviceIDs(ids[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS) p->devices = nd;
  }
}
#else
static void read_opencl(struct mzi_libs *L) { read_icds(L); }
#endif

static void read_cuda(struct mzi_libs *L) {
  L->cuda_built = MZ_HAVE_CUDA;
  const char *env = getenv("MZ_CUDA_LIBRARY");
  snprintf(L->cuda_library, sizeof L->cuda_library, "%s", env && *env ? env : "libcuda.so.1");
  void *h = dlopen(L->cuda_library, RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(L->cuda_error, sizeof L->cuda_error, "%s", why ? why : "cannot be loaded");
    return;
  }
  loaded_path(h, L->cuda_path, sizeof L->cuda_path);
  int (*get_version)(int *) = (int (*)(int *))(uintptr_t)dlsym(h, "cuDriverGetVersion");
  int v = 0;
  if (get_version && get_version(&v) == 0 && v > 0) L->cuda_driver_version = v;
  else snprintf(L->cuda_error, sizeof L->cuda_error, "cuDriverGetVersion failed or is missing");
  /* The backend holds its own reference when it uses the driver; this one
   * goes (no cuInit was called through it). */
  dlclose(h);
}

void mzi_libs_read(struct mzi_libs *L) {
  memset(L, 0, sizeof *L);
  read_opencl(L);
  read_cuda(L);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void json_str_or_null(FILE *f, const char *s) {
  if (s && *s) json_str(f, s);
  else fputs("null", f);
}

void mzi_libs_json(FILE *f, const struct mzi_libs *L) {
  fprintf(f, "  \"opencl\": {\"built\": %s, \"loader\": ", L->opencl_built ? "true" : "false");
  json_str_or_null(f, L->loader);
  fputs(", \"icd_dir\": ", f);
  json_str(f, L->icd_dir);
  fputs(", \"icd_dir_error\": ", f);
  json_str_or_null(f, L->icd_error);
  fputs(", \"icds\": [", f);
  for (unsigned i = 0; i < L->nicds; i++) {
    fprintf(f, "%s{\"file\": ", i ? ", " : "");
    json_str(f, L->icds[i].file);
    fputs(", \"library\": ", f);
    json_str(f, L->icds[i].library);
    fprintf(f, ", \"loaded\": %s, \"path\": ", L->icds[i].loaded ? "true" : "false");
    json_str_or_null(f, L->icds[i].path);
    fputc('}', f);
  }
  fputs("], \"platforms\": [", f);
  for (unsigned i = 0; i < L->nplatforms; i++) {
    fprintf(f, "%s{\"name\": ", i ? ", " : "");
    json_str(f, L->platforms[i].name);
    fputs(", \"vendor\": ", f);
    json_str(f, L->platforms[i].vendor);
    fputs(", \"version\": ", f);
    json_str(f, L->platforms[i].version);
    fprintf(f, ", \"devices\": %u}", L->platforms[i].devices);
  }
  fprintf(f, "]},\n  \"cuda\": {\"built\": %s, \"library\": ", L->cuda_built ? "true" : "false");
  json_str(f, L->cuda_library);
  fputs(", \"path\": ", f);
  json_str_or_null(f, L->cuda_path);
  fputs(", \"driver_version\": ", f);
  if (L->cuda_driver_version)
    fprintf(f, "\"%d.%d\"", L->cuda_driver_version / 1000, L->cuda_driver_version % 1000 / 10);
  else
    fputs("null", f);
  fputs(", \"error\": ", f);
  json_str_or_null(f, L->cuda_error);
  fputs("}", f);
}

void mzi_libs_text(FILE *f, const struct mzi_libs *L) {
  fputs("\nOpenCL:", f);
  if (!L->opencl_built) fputs(" the backend is not built (no OpenCL ICD loader at build time)", f);
  else fprintf(f, " ICD loader %s", L->loader[0] ? L->loader : "(not found)");
  fprintf(f, "\n  installable client drivers in %s:", L->icd_dir);
  if (L->icd_error[0]) fprintf(f, " cannot be read: %s", L->icd_error);
  else if (!L->nicds) fputs(" none", f);
  fputc('\n', f);
  for (unsigned i = 0; i < L->nicds; i++) {
    const struct mzi_icd *d = &L->icds[i];
    fprintf(f, "    %-20s %s", d->file, d->library[0] ? d->library : "(empty)");
    if (d->loaded) fprintf(f, "  loaded from %s\n", d->path[0] ? d->path : "?");
    else fprintf(f, "  %s\n", L->opencl_built ? "NOT LOADED (missing, or it failed to load)" : "");
  }
  if (L->opencl_built) {
    fprintf(f, "  platforms (%u):\n", L->nplatforms);
    for (unsigned i = 0; i < L->nplatforms; i++)
      fprintf(f, "    %s (%s): %s, %u device(s)\n", L->platforms[i].name, L->platforms[i].vendor,
              L->platforms[i].version, L->platforms[i].devices);
  }
  fprintf(f, "CUDA: driver %s", L->cuda_library);
  if (L->cuda_path[0]) fprintf(f, " loaded from %s", L->cuda_path);
  else fputs(" not loaded", f);
  if (L->cuda_driver_version)
    fprintf(f, ", driver API %d.%d", L->cuda_driver_version / 1000, L->cuda_driver_version % 1000 / 10);
  if (L->cuda_error[0]) fprintf(f, " (%s)", L->cuda_error);
  if (!L->cuda_built) fputs(" (the CUDA backend is not built: no cuda.h at build time)", f);
  fputc('\n', f);
}
