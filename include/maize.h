/* maize: run a DAG of device operations on every compute device of a
 * machine.  This umbrella header is all an application needs; policy
 * writers add <maize/policy.h>.  See README.md for a tour. */
#ifndef MAIZE_H
#define MAIZE_H

#include "maize/error.h"
#include "maize/types.h"
#include "maize/runtime.h"
#include "maize/device.h"
#include "maize/kernel.h"
#include "maize/buffer.h"
#include "maize/graph.h"
#include "maize/future.h"
#include "maize/observer.h"
#include "maize/ops.h"
#include "maize/version.h"

#endif
