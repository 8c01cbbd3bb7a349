/* version.h - the daemon's version, in GET /v1/status and nightshift_build_info. */
#ifndef NIGHTSHIFT_VERSION_H
#define NIGHTSHIFT_VERSION_H

#define NIGHTSHIFT_VERSION "0.1.0"

#endif
