/* maize-info: the OpenCL ICD loader, the installable client drivers and
 * platforms, and the CUDA driver library this process finds (libs.c). */
#ifndef MZI_LIBS_H
#define MZI_LIBS_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>

#define MZI_MAX_ICDS 32
#define MZI_MAX_PLATFORMS 16

struct mzi_icd {
  char file[256];    /* the .icd file's name */
  char library[512]; /* the library it names */
  char path[PATH_MAX]; /* where that library was loaded from; "" if not loaded */
  bool loaded;
};

struct mzi_platform {
  char name[256], vendor[256], version[256];
  unsigned devices;
};

struct mzi_libs {
  bool opencl_built;       /* maize has its OpenCL backend */
  char loader[PATH_MAX];   /* the ICD loader's file; "" when unknown */
  char icd_dir[PATH_MAX];  /* where ICDs are listed */
  char icd_error[256];     /* why icd_dir cannot be read; "" when it can */
  struct mzi_icd icds[MZI_MAX_ICDS];
  unsigned nicds;
  struct mzi_platform platforms[MZI_MAX_PLATFORMS];
  unsigned nplatforms;
  bool cuda_built;         /* maize has its CUDA backend */
  char cuda_library[512];  /* the name dlopen was given */
  char cuda_path[PATH_MAX]; /* where it was loaded from; "" when not */
  int cuda_driver_version; /* cuDriverGetVersion (12040 for 12.4); 0 when unknown */
  char cuda_error[512];    /* why not loaded or no version; "" when fine */
};

/* Fill *L: call after mz_runtime_create (OpenCL discovery has loaded the
 * drivers).  Never calls cuInit. */
void mzi_libs_read(struct mzi_libs *L);
/* Print *L as text (a section of maize-info's report) or as the members
 * "opencl" and "cuda" of its JSON object (no trailing comma). */
void mzi_libs_text(FILE *f, const struct mzi_libs *L);
void mzi_libs_json(FILE *f, const struct mzi_libs *L);

#endif
