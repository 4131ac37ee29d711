/* LD_PRELOAD shim for recording convert_mnist_siamese_data with a known seed: Caffe seeds its
 * generator from 8 bytes of /dev/urandom (cluster_seedgen); with SEED_SHIM_FILE set, an open
 * of /dev/urandom opens that file instead.  Built and used by record.py only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* redirect(const char* path) {
  const char* file = getenv("SEED_SHIM_FILE");
  if (path && file && strcmp(path, "/dev/urandom") == 0) return file;
  return path;
}

FILE* fopen(const char* path, const char* mode) {
  FILE* (*real)(const char*, const char*) = (FILE* (*)(const char*, const char*))dlsym(RTLD_NEXT, "fopen");
  return real(redirect(path), mode);
}

FILE* fopen64(const char* path, const char* mode) {
  FILE* (*real)(const char*, const char*) = (FILE* (*)(const char*, const char*))dlsym(RTLD_NEXT, "fopen64");
  return real(redirect(path), mode);
}
