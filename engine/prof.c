/* prof.c - the engine's phase timers (see prof.h). */
#include "engine/prof.h"

#include <string.h>

double prof_seconds[PROF_PHASES];
int prof_depth;

void prof_reset(void) {
    memset(prof_seconds, 0, sizeof prof_seconds);
    prof_depth = 0;
}
