/* The error list's two lookups, generated from MZ_ERRNO_MAP. */
#include "maize/error.h"

const char *mz_strerror(int code) {
  switch (code) {
#define MZ__ERR_TEXT(name, value, text) \
  case (value):                         \
    return text;
    MZ_ERRNO_MAP(MZ__ERR_TEXT)
#undef MZ__ERR_TEXT
  }
  return "unknown error";
}

const char *mz_err_name(int code) {
  switch (code) {
#define MZ__ERR_NAME(name, value, text) \
  case (value):                         \
    return "MZ_" #name;
    MZ_ERRNO_MAP(MZ__ERR_NAME)
#undef MZ__ERR_NAME
  }
  return "MZ_EUNKNOWN";
}
