"""The one thing pyproject.toml cannot declare: the package's optional C extension, the
capture readers' loops, the CRCs and the fast path's MAD decoder (ibpath_scapy/native/_scan.c,
_mad.c, _crc.h).

optional=True: where no compiler or no Python headers exist the build goes on without it,
and the same code runs in Python (ibpath_scapy/native/__init__.py: pcapio's loops, crc's CRCs,
fast/decoder.py's decode_at)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ibpath_scapy.native._scan",
                             ["ibpath_scapy/native/_scan.c", "ibpath_scapy/native/_mad.c"],
                             depends=["ibpath_scapy/native/_crc.h"],
                             optional=True, extra_compile_args=["-O2"])])
