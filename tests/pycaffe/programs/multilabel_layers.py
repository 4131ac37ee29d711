"""A synchronous Python data layer in the manner of Caffe's
examples/pycaffe/layers/pascal_multilabel_datalayers.py: a dict in param_str read with
eval, tops shaped once in setup (reshape does nothing), ``self.top_names`` kept on the
layer, a batch loader object, multi-hot labels."""
import caffe
import numpy as np


class MultilabelDataLayerSync(caffe.Layer):

    def setup(self, bottom, top):
        self.top_names = ["data", "label"]
        params = eval(self.param_str)
        assert "split" in params.keys(), "Params must include split (train, val, or test)."
        for r in ("batch_size", "im_shape", "num_classes"):
            assert r in params.keys(), "Params must include {}".format(r)
        self.batch_size = params["batch_size"]
        self.batch_loader = BatchLoader(params)
        top[0].reshape(self.batch_size, 3, params["im_shape"][0], params["im_shape"][1])
        top[1].reshape(self.batch_size, params["num_classes"])
        print("{} initialized for split: {}, with bs: {}, im_shape: {}.".format(
            type(self).__name__, params["split"], params["batch_size"], params["im_shape"]))

    def forward(self, bottom, top):
        for itt in range(self.batch_size):
            im, multilabel = self.batch_loader.load_next_image()
            top[0].data[itt, ...] = im
            top[1].data[itt, ...] = multilabel

    def reshape(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass


class BatchLoader(object):
    def __init__(self, params):
        self.im_shape = params["im_shape"]
        self.num_classes = params["num_classes"]
        self.rng = np.random.RandomState(0 if params["split"] == "train" else 1)
        self._cur = 0

    def load_next_image(self):
        im = self.rng.uniform(0, 255, (3,) + tuple(self.im_shape)).astype(np.float32)
        multilabel = np.zeros(self.num_classes, np.float32)
        multilabel[self.rng.choice(self.num_classes, 2, replace=False)] = 1
        self._cur += 1
        return im - 128, multilabel
