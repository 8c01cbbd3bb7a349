/* serve.h - `nightshift serve`, the daemon (see serve.c). */
#ifndef NIGHTSHIFT_SERVE_H
#define NIGHTSHIFT_SERVE_H

int serve_main(int argc, char **argv);

#endif
