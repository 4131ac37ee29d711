"""Export from a Net whose blobs live on the GPU and verify it (the engine on the GPU against
onnxruntime on the CPU): the exporter reads params and shapes through the host views.

    python benchmarks/ports_gpu_check.py
"""
import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import engine  # noqa: E402


def main():
    from benchmarks import ports_nets
    from engine import ports
    if not engine.gpu_available():
        print("no GPU")
        return 1
    engine.set_mode_gpu()
    ok = True
    for label, build in [("squeezenet1.1", lambda: engine.Net.from_param(ports_nets.squeezenet("1.1"),
                                                                         phase=engine.TEST)),
                         ("mobilenet_v2", lambda: engine.Net.from_param(ports_nets.mobilenet_v2(),
                                                                        phase=engine.TEST))]:
        t = time.time()
        net = build()
        ports.randomize_params(net, 0)
        ports.random_inputs(net, 0)
        net.Forward()                       # the params and blobs now live on the GPU
        res = ports.export_onnx(net, opset="latest")
        result = ports.verify(net, res.model, rtol=2e-5)
        print("%s (GPU engine vs onnxruntime CPU), opset %d: %s [%.1fs]" % (label, res.opset, result.summary(),
                                                                          time.time() - t))
        ok = ok and result.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
