"""Commands: ``python -m engine ...`` (Caffe's ``caffe`` tool and its companions),
training and testing commands.  Built on core, instruments and pycaffe."""
