"""The generated Caffe protobuf module: ``engine.proto.caffe_pb2`` (pycaffe's
``caffe.proto.caffe_pb2``).  Regenerate with ``python proto/generate.py``."""
