"""pycaffe's ``caffe.Classifier``: a Net (TEST phase, with weights) that predicts class
probabilities for images: resized to ``image_dims``, then the centre crop or the ten
``oversample`` crops (averaged), preprocessed by a :class:`~engine.pycaffe.io.Transformer`
(transpose (2, 0, 1), then the optional mean, input_scale, raw_scale, channel_swap) and run
with ``forward_all`` over the first input; the first output is returned.
"""
import numpy as np

from engine.core.net import TEST, Net
from engine.pycaffe import io as caffe_io

__all__ = ["Classifier"]


def input_transformer(net, mean, input_scale, raw_scale, channel_swap):
    """The Transformer of Classifier and Detector for the net's first input: transpose
    (2, 0, 1), then each of mean, input_scale, raw_scale, channel_swap that is given."""
    in_ = net.inputs[0]
    transformer = caffe_io.Transformer({in_: net.blobs[in_].data.shape})
    transformer.set_transpose(in_, (2, 0, 1))
    if mean is not None:
        transformer.set_mean(in_, mean)
    if input_scale is not None:
        transformer.set_input_scale(in_, input_scale)
    if raw_scale is not None:
        transformer.set_raw_scale(in_, raw_scale)
    if channel_swap is not None:
        transformer.set_channel_swap(in_, channel_swap)
    return transformer


class Classifier(Net):
    """``Classifier(model_file, pretrained_file, image_dims=None, mean=None,
    input_scale=None, raw_scale=None, channel_swap=None)``."""

    def __init__(self, model_file, pretrained_file, image_dims=None, mean=None, input_scale=None,
                 raw_scale=None, channel_swap=None):
        Net.__init__(self, model_file, TEST, weights=pretrained_file)
        in_ = self.inputs[0]
        self.transformer = input_transformer(self, mean, input_scale, raw_scale, channel_swap)
        self.crop_dims = np.array(self.blobs[in_].data.shape[2:])
        if not image_dims:
            image_dims = self.crop_dims
        self.image_dims = image_dims

    def predict(self, inputs, oversample=True):
        """(N x C) class probabilities for N images (H x W x K arrays): averaged over the
        ten crops with ``oversample`` (the default), else from the centre crop."""
        input_ = np.zeros((len(inputs), self.image_dims[0], self.image_dims[1], inputs[0].shape[2]),
                          dtype=np.float32)
        for ix, in_ in enumerate(inputs):
            input_[ix] = caffe_io.resize_image(in_, self.image_dims)
        if oversample:
            input_ = caffe_io.oversample(input_, self.crop_dims)
        else:
            center = np.array(self.image_dims) / 2.0
            crop = np.tile(center, (1, 2))[0] + np.concatenate([-self.crop_dims / 2.0, self.crop_dims / 2.0])
            crop = crop.astype(int)
            input_ = input_[:, crop[0]:crop[2], crop[1]:crop[3], :]
        caffe_in = np.zeros(np.array(input_.shape)[[0, 3, 1, 2]], dtype=np.float32)
        for ix, in_ in enumerate(input_):
            caffe_in[ix] = self.transformer.preprocess(self.inputs[0], in_)
        out = self.forward_all(**{self.inputs[0]: caffe_in})
        predictions = out[self.outputs[0]]
        if oversample:
            predictions = predictions.reshape((len(predictions) // 10, 10, -1))
            predictions = predictions.mean(1)
        return predictions
