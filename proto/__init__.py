"""The Caffe protobuf schema (caffe.proto) and its generated Python module."""
