"""The one thing pyproject.toml cannot declare: the optional C loops of the capture readers.

optional=True: where no compiler or no Python headers exist the build goes on without them,
and pcapio runs the same loops in Python (its _scanners picks whichever is there)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ibpath_scapy.fast._scan", ["ibpath_scapy/fast/_scan.c"],
                             optional=True, extra_compile_args=["-O2"])])
