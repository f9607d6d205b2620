/* A stand-in for libcuda.so.1 that has cuInit and nothing else, so the
 * CUDA loader's missing-symbol path can be tested on any machine.  It is
 * not a mock of CUDA: nothing ever gets far enough to call it. */
int cuInit(unsigned int flags);
int cuInit(unsigned int flags) {
  (void)flags;
  return 0;
}
