/* maize internals: the tag in the first word of every public object. */
#ifndef MZ_HANDLE_H
#define MZ_HANDLE_H

#include <stdint.h>

/*
 * The first word of every public object says what it is.  It is set at
 * creation and poisoned with MZ__TAG_DEAD when the user destroys the handle
 * (or the object is freed), so NULL, a handle of another kind, and a
 * destroyed handle whose memory is still held (a graph with runs in flight,
 * a kernel a graph still uses, a future whose run goes on) are refused with
 * MZ_EINVAL, never a crash.  One load per public call, never on the
 * dispatch path.  A handle whose memory was freed cannot be told apart
 * reliably (README.md, "Handles that cannot be checked"). */
enum mz__tag {
  MZ__TAG_RUNTIME = 0x4d5a5254u,
  MZ__TAG_GRAPH = 0x4d5a4752u,
  MZ__TAG_BUFFER = 0x4d5a4246u,
  MZ__TAG_KERNEL = 0x4d5a4b4eu,
  MZ__TAG_FUTURE = 0x4d5a4655u,
  MZ__TAG_DEAD = 0xdead0bedu,
};
#define MZ__LIVE(obj, TAG) ((obj) != NULL && (obj)->tag == (uint32_t)(TAG))

#endif
