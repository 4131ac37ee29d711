"""Looking at a net: debug records and Caffe's debug_info lines, health findings,
static analysis (FLOPs, memory), comparisons, timing, Caffe log reading, reports,
drawing and the shared graph layout, the numeric gradient checker.  Built on
``engine.core`` only."""
