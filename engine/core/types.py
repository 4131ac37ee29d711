"""Type names shared by the engine's annotations."""
from typing import TYPE_CHECKING, Any

# A blob's memory on the current device: numpy.ndarray on the CPU, cupy.ndarray on the GPU
# (CuPy is optional, so the type is not spelled as a union of the two).
Array = Any

if TYPE_CHECKING:
    from engine.core.blob import Blob

# A layer's bottom or top blobs (Caffe's vector<Blob<Dtype>*>).
BlobVec = list["Blob"]
