"""Code generation: the CUB C++ translation unit and the Numba program body."""
