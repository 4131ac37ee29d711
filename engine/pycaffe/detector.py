"""pycaffe's ``caffe.Detector``: windowed detection (R-CNN style) with a Net in the TEST
phase: each window of each image is cropped (with ``context_pad`` pixels of context
padded with the mean, as R-CNN), warped to the net's input size by the Transformer and
classified with ``forward_all``; ``detect_selective_search`` gets the windows from the
external ``selective_search_ijcv_with_python`` package, as pycaffe does.

The context crop uses the same arithmetic as pycaffe; where pycaffe indexes with the
float results of ``np.round`` (which old NumPy truncated and new NumPy refuses), they are
turned into ints first.
"""
import os

import numpy as np

from engine.core.net import TEST, Net
from engine.pycaffe import io as caffe_io
from engine.pycaffe.classifier import input_transformer

__all__ = ["Detector"]


class Detector(Net):
    """``Detector(model_file, pretrained_file, mean=None, input_scale=None, raw_scale=None,
    channel_swap=None, context_pad=None)``."""

    def __init__(self, model_file, pretrained_file, mean=None, input_scale=None, raw_scale=None,
                 channel_swap=None, context_pad=None):
        Net.__init__(self, model_file, TEST, weights=pretrained_file)
        self.transformer = input_transformer(self, mean, input_scale, raw_scale, channel_swap)
        self.configure_crop(context_pad)

    def detect_windows(self, images_windows):
        """[{'window', 'prediction', 'filename'}] for every window (ymin, xmin, ymax, xmax)
        of every (image filename, windows) pair."""
        window_inputs = []
        for image_fname, windows in images_windows:
            image = caffe_io.load_image(image_fname).astype(np.float32)
            for window in windows:
                window_inputs.append(self.crop(image, window))
        in_ = self.inputs[0]
        caffe_in = np.zeros((len(window_inputs), window_inputs[0].shape[2]) + self.blobs[in_].data.shape[2:],
                            dtype=np.float32)
        for ix, window_in in enumerate(window_inputs):
            caffe_in[ix] = self.transformer.preprocess(in_, window_in)
        out = self.forward_all(**{in_: caffe_in})
        predictions = out[self.outputs[0]]
        detections = []
        ix = 0
        for image_fname, windows in images_windows:
            for window in windows:
                detections.append({"window": window, "prediction": predictions[ix], "filename": image_fname})
                ix += 1
        return detections

    def detect_selective_search(self, image_fnames):
        """Windowed detection over Selective Search proposals (needs the external
        ``selective_search_ijcv_with_python`` package and MATLAB, as in pycaffe)."""
        import selective_search_ijcv_with_python as selective_search
        image_fnames = [os.path.abspath(f) for f in image_fnames]
        windows_list = selective_search.get_windows(image_fnames, cmd="selective_search_rcnn")
        return self.detect_windows(zip(image_fnames, windows_list))

    def crop(self, im, window):
        """The window (ymin, xmin, ymax, xmax) of ``im``, with ``context_pad`` context:
        the box is grown so that the net's input holds that much context, clipped to the
        image, resized and placed on a mean-filled canvas."""
        crop = im[window[0]:window[2], window[1]:window[3]]
        if self.context_pad:
            box = window.copy()
            crop_size = self.blobs[self.inputs[0]].width    # assumes square
            scale = crop_size / (1. * crop_size - self.context_pad * 2)
            half_h = (box[2] - box[0] + 1) / 2.
            half_w = (box[3] - box[1] + 1) / 2.
            center = (box[0] + half_h, box[1] + half_w)
            scaled_dims = scale * np.array((-half_h, -half_w, half_h, half_w))
            box = np.round(np.tile(center, 2) + scaled_dims)
            full_h = box[2] - box[0] + 1
            full_w = box[3] - box[1] + 1
            scale_h = crop_size / full_h
            scale_w = crop_size / full_w
            pad_y = int(round(max(0, -box[0]) * scale_h))     # out of bounds
            pad_x = int(round(max(0, -box[1]) * scale_w))
            im_h, im_w = im.shape[:2]
            box = np.clip(box, 0., [im_h, im_w, im_h, im_w])
            clip_h = box[2] - box[0] + 1
            clip_w = box[3] - box[1] + 1
            assert clip_h > 0 and clip_w > 0
            crop_h = int(round(clip_h * scale_h))
            crop_w = int(round(clip_w * scale_w))
            if pad_y + crop_h > crop_size:
                crop_h = crop_size - pad_y
            if pad_x + crop_w > crop_size:
                crop_w = crop_size - pad_x
            ibox = box.astype(int)
            context_crop = im[ibox[0]:ibox[2], ibox[1]:ibox[3]]
            context_crop = caffe_io.resize_image(context_crop, (crop_h, crop_w))
            crop = np.ones(self.crop_dims, dtype=np.float32) * self.crop_mean
            crop[pad_y:(pad_y + crop_h), pad_x:(pad_x + crop_w)] = context_crop
        return crop

    def configure_crop(self, context_pad):
        """The crop dimensions (the input's, untransposed) and, with ``context_pad``, the
        mean in unprocessed image space that pads context crops."""
        in_ = self.inputs[0]
        tpose = self.transformer.transpose[in_]
        inv_tpose = [tpose[t] for t in tpose]
        self.crop_dims = np.array(self.blobs[in_].data.shape[1:])[inv_tpose]
        self.context_pad = context_pad
        if self.context_pad:
            transpose = self.transformer.transpose.get(in_)
            channel_order = self.transformer.channel_swap.get(in_)
            raw_scale = self.transformer.raw_scale.get(in_)
            mean = self.transformer.mean.get(in_)
            if mean is not None:
                inv_transpose = [transpose[t] for t in transpose]
                crop_mean = mean.copy().transpose(inv_transpose)
                if channel_order is not None:
                    channel_order_inverse = [channel_order.index(i) for i in range(crop_mean.shape[2])]
                    crop_mean = crop_mean[:, :, channel_order_inverse]
                if raw_scale is not None:
                    crop_mean /= raw_scale
                self.crop_mean = crop_mean
            else:
                self.crop_mean = np.zeros(self.crop_dims, dtype=np.float32)
