"""Caffe itself: blobs, the Net and its Init (filter, splits, upgrade), layers, kernels,
fillers, solvers, and reading/writing Caffe's files.  Imports nothing from the rest of
the engine (instruments, pycaffe, tools) nor from the inspector."""
