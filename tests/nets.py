"""Small nets shared by several test modules."""

# exp(exp(exp(x))): an input of 2 overflows at exp3 (exp(1618)); 1 stays finite (3.8e6);
# "half" carries the Inf on.
OVERFLOW = """
name: "Overflow"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 4 dim: 25 } } }
layer { name: "exp1" type: "Exp" bottom: "data" top: "e1" }
layer { name: "exp2" type: "Exp" bottom: "e1" top: "e2" }
layer { name: "exp3" type: "Exp" bottom: "e2" top: "e3" }
layer { name: "half" type: "Power" bottom: "e3" top: "out" power_param { scale: 0.5 } }
"""
