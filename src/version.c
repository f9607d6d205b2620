/* mz_version: the version this library was built as. */
#include "maize/version.h"

const char *mz_version(void) { return MZ_VERSION_STRING; }
