"""A segmentation data layer written the way FCN's Python data layers are: settings come
from a dict literal in ``param_str``, each forward gives one (image, label) pair, and
``reshape`` loads the next pair and gives the tops that pair's size, so the whole net
reshapes from one forward to the next.  State lives on the layer (``self.image``,
``self.labels``, ``self.cursor``); the order is random from a seed for training and
sequential otherwise."""
import os
import random

import caffe
import numpy as np


class SegDataLayer(caffe.Layer):
    def setup(self, bottom, top):
        settings = eval(self.param_str)
        self.folder = settings["data_dir"]
        self.split = settings["split"]
        self.pixel_mean = np.asarray(settings["mean"], dtype=np.float32)
        self.shuffle = settings.get("randomize", True) and self.split.startswith("train")
        if bottom or len(top) != 2:
            raise ValueError("SegDataLayer takes no bottoms and makes two tops (image, label)")
        with open(os.path.join(self.folder, self.split + ".txt")) as f:
            self.names = [line.strip() for line in f if line.strip()]
        self.draw = random.Random(settings.get("seed"))
        self.cursor = self._next(-1)

    def _next(self, current):
        if self.shuffle:
            return self.draw.randint(0, len(self.names) - 1)
        return (current + 1) % len(self.names)

    def reshape(self, bottom, top):
        name = self.names[self.cursor]
        rgb = np.load(os.path.join(self.folder, name + "_img.npy")).astype(np.float32)
        self.image = (rgb[:, :, ::-1] - self.pixel_mean).transpose(2, 0, 1)
        self.labels = np.load(os.path.join(self.folder, name + "_cls.npy")).astype(np.uint8)[None]
        top[0].reshape(1, *self.image.shape)
        top[1].reshape(1, *self.labels.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.image
        top[1].data[...] = self.labels
        self.cursor = self._next(self.cursor)

    def backward(self, top, propagate_down, bottom):
        pass
