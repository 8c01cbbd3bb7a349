probe.o: build/layer-probe/probe.c build/include/engine/engine/spec.h \
 build/include/engine/engine/util.h
build/include/engine/engine/spec.h:
build/include/engine/engine/util.h:
