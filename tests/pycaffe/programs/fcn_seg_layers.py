"""A Python data layer in the manner of FCN's voc_layers.VOCSegDataLayer: parameters from
``eval(self.param_str)``, one (image, label) pair per forward, the tops reshaped in
``reshape`` to each pair's own size; state kept in self.data / self.label / self.idx."""
import os
import random

import caffe
import numpy as np


class SegDataLayer(caffe.Layer):
    def setup(self, bottom, top):
        params = eval(self.param_str)
        self.data_dir = params["data_dir"]
        self.split = params["split"]
        self.mean = np.array(params["mean"])
        self.random = params.get("randomize", True)
        self.seed = params.get("seed", None)
        if len(top) != 2:
            raise Exception("Need to define two tops: data and label.")
        if len(bottom) != 0:
            raise Exception("Do not define a bottom.")
        split_f = "{}/{}.txt".format(self.data_dir, self.split)
        self.indices = open(split_f, "r").read().splitlines()
        self.idx = 0
        if "train" not in self.split:
            self.random = False
        if self.random:
            random.seed(self.seed)
            self.idx = random.randint(0, len(self.indices) - 1)

    def reshape(self, bottom, top):
        self.data = self.load_image(self.indices[self.idx])
        self.label = self.load_label(self.indices[self.idx])
        top[0].reshape(1, *self.data.shape)
        top[1].reshape(1, *self.label.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.data
        top[1].data[...] = self.label
        if self.random:
            self.idx = random.randint(0, len(self.indices) - 1)
        else:
            self.idx += 1
            if self.idx == len(self.indices):
                self.idx = 0

    def backward(self, top, propagate_down, bottom):
        pass

    def load_image(self, idx):
        in_ = np.load(os.path.join(self.data_dir, idx + "_img.npy")).astype(np.float32)
        in_ = in_[:, :, ::-1]
        in_ -= self.mean
        return in_.transpose((2, 0, 1))

    def load_label(self, idx):
        return np.load(os.path.join(self.data_dir, idx + "_cls.npy")).astype(np.uint8)[np.newaxis, ...]
