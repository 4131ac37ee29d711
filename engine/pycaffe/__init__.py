"""pycaffe's ``python/caffe`` surface on the engine."""
