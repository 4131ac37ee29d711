"""A synchronous multi-label data layer of the kind Caffe's pascal-multilabel notebook
uses: a dict literal in ``param_str`` read with eval, the tops given their shapes once in
``setup`` (``reshape`` has nothing to do), a loader object kept on the layer with
``self.top_names`` and ``self.batch_size``, multi-hot label rows."""
import caffe
import numpy as np


class MultilabelDataLayerSync(caffe.Layer):

    def setup(self, bottom, top):
        self.top_names = ["data", "label"]
        cfg = eval(self.param_str)
        missing = [k for k in ("split", "batch_size", "im_shape", "num_classes") if k not in cfg]
        if missing:
            raise KeyError("param_str lacks %s" % ", ".join(missing))
        self.batch_size = cfg["batch_size"]
        self.loader = RandomImages(cfg)
        height, width = cfg["im_shape"]
        top[0].reshape(self.batch_size, 3, height, width)
        top[1].reshape(self.batch_size, cfg["num_classes"])
        print("%s ready: split %s, batch %d, images %s" % (type(self).__name__, cfg["split"], self.batch_size,
                                                          cfg["im_shape"]))

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        for row in range(self.batch_size):
            top[0].data[row], top[1].data[row] = self.loader.next()

    def backward(self, top, propagate_down, bottom):
        pass


class RandomImages(object):
    """Images of noise, each with two classes present."""

    def __init__(self, cfg):
        self.shape = (3,) + tuple(cfg["im_shape"])
        self.classes = cfg["num_classes"]
        self.draws = np.random.RandomState(0 if cfg["split"] == "train" else 1)

    def next(self):
        image = self.draws.uniform(-128, 127, self.shape).astype(np.float32)
        hot = np.zeros(self.classes, np.float32)
        hot[self.draws.choice(self.classes, 2, replace=False)] = 1
        return image, hot
