"""The converters' test inputs, made the same way for real Caffe (record.py) and for the
tests: small IDX files (1234 images of 5 x 7: the commits at every 1000th item and a last
partial one, rows and cols that differ) and CIFAR-10 batches of Caffe's fixed size (10,000
records each: convert_cifar_data reads exactly that many).  Every byte comes from
splitmix64 over a counter, in NumPy uint64 arithmetic, so the files are the same on any
NumPy; a few labels are 128 or more, to check that both read them as C's (signed) char.
Also the digest both sides use for a database: :func:`records_digest`."""
import hashlib
import struct

import numpy as np

MNIST_ITEMS, MNIST_ROWS, MNIST_COLS = 1234, 5, 7
HIGH_LABELS = {7: 200, 1000: 255, 1233: 128}          # item -> a label byte above 127
CIFAR_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch")
CIFAR_RECORDS, CIFAR_RECORD_BYTES = 10000, 3073


def mixed_bytes(seed, n):
    """``n`` pseudo-random bytes: splitmix64 of seed * 2**32 + 0, 1, 2, ..."""
    with np.errstate(over="ignore"):
        x = np.arange((n + 7) // 8, dtype=np.uint64) + np.uint64(seed << 32)
        x = x * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x.astype("<u8").view(np.uint8)[:n]


def mnist_arrays():
    """(images uint8 N x rows x cols, labels uint8 N)."""
    images = mixed_bytes(1, MNIST_ITEMS * MNIST_ROWS * MNIST_COLS).reshape(MNIST_ITEMS, MNIST_ROWS, MNIST_COLS)
    labels = mixed_bytes(2, MNIST_ITEMS) % np.uint8(10)
    for item, value in HIGH_LABELS.items():
        labels[item] = value
    return images, labels


def idx_bytes(images, labels):
    """The two IDX files (images magic 2051, labels 2049), big-endian headers."""
    n, rows, cols = images.shape
    img = struct.pack(">IIII", 2051, n, rows, cols) + images.tobytes()
    lab = struct.pack(">II", 2049, n) + labels.tobytes()
    return img, lab


def write_mnist(folder):
    """``folder/images-idx3-ubyte`` and ``folder/labels-idx1-ubyte``; returns their paths."""
    img, lab = idx_bytes(*mnist_arrays())
    paths = (str(folder) + "/images-idx3-ubyte", str(folder) + "/labels-idx1-ubyte")
    for path, data in zip(paths, (img, lab)):
        with open(path, "wb") as f:
            f.write(data)
    return paths


def cifar_records(index):
    """CIFAR_FILES[index] as 10,000 x 3073 bytes (the label byte first)."""
    recs = mixed_bytes(10 + index, CIFAR_RECORDS * CIFAR_RECORD_BYTES).reshape(CIFAR_RECORDS, CIFAR_RECORD_BYTES)
    recs[:, 0] %= np.uint8(10)
    recs[index * 7 + 3, 0] = 200 + index          # one label above 127 in each file
    return recs


def write_cifar(folder):
    """The six batch files in ``folder``, named as CIFAR-10's binary version names them."""
    for i, name in enumerate(CIFAR_FILES):
        cifar_records(i).tofile(str(folder) + "/%s.bin" % name)


def records_digest(records):
    """sha256 over the (key, value) pairs in order, each length-prefixed (little-endian u32)."""
    h = hashlib.sha256()
    for key, value in records:
        h.update(struct.pack("<I", len(key)) + key + struct.pack("<I", len(value)) + value)
    return h.hexdigest()
