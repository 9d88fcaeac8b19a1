"""The one thing pyproject.toml cannot declare: the package's optional C extension, the
capture readers' loops, the CRCs, the fast path's MAD decoder, the audit's frame-finding
test, the replay's SA steps, its Spill file's chunks and the layer facts' JSON text
(ibpath_scapy/native/_scan.c, _mad.c, _frametest.c, _intake.c, _rows.c, _factjson.c,
_buf.h, _capture.h, _crc.h, _pyhelp.h).

optional=True: where no compiler or no Python headers exist the build goes on without it,
and the same code runs in Python (ibpath_scapy/native/__init__.py: pcapio's loops, crc's CRCs,
fast/decoder.py's decode_at).

IBPATH_SANITIZE=1 in the environment builds it with AddressSanitizer and
UndefinedBehaviorSanitizer (gcc or clang; -O1, frame pointers, every UB report fatal) and
not optional: for tools/covfuzz.py --sanitize, which builds such a copy beside the checkout
(build/covfuzz-sanitize/) and preloads libasan, since the interpreter is not built with it.
Do not install a sanitized build: importing it without libasan preloaded fails. Its objects
go to build/sanitized/, never where a plain build looks for its own."""

import os

from setuptools import Extension, setup

SANITIZE = os.environ.get("IBPATH_SANITIZE", "").strip().lower() not in ("", "0", "no", "off", "false")
FLAGS = (["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
          "-fno-sanitize-recover=undefined"] if SANITIZE else ["-O2"])

setup(ext_modules=[Extension("ibpath_scapy.native._scan",
                             ["ibpath_scapy/native/_scan.c", "ibpath_scapy/native/_mad.c",
                              "ibpath_scapy/native/_intake.c", "ibpath_scapy/native/_rows.c",
                              "ibpath_scapy/native/_frametest.c", "ibpath_scapy/native/_factjson.c"],
                             depends=["ibpath_scapy/native/_buf.h",
                                      "ibpath_scapy/native/_capture.h",
                                      "ibpath_scapy/native/_crc.h",
                                      "ibpath_scapy/native/_pyhelp.h"],
                             optional=not SANITIZE, extra_compile_args=FLAGS,
                             extra_link_args=FLAGS[-2:] if SANITIZE else [])],
      # a sanitized build's objects in a build folder of their own: pip builds in the
      # checkout's build/, and a later plain build would take them as up to date
      options={"build": {"build_base": "build/sanitized"}} if SANITIZE else {})
