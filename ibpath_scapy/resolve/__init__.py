"""`ibpath resolve`: the 2009 seed thread's resolver performed against a real SA.

- umad.py: the SA through libibumad (ctypes): port choice, SA agent, sends and whole reads;
- live.py: the PathSA craft's SeedResolver asks (queries built and answers read with the
  layers), over libibumad or over craft's SA model;
- kernel.py: which kernel profile the array is built for (the running kernel's version);
- run.py: one resolution, its layout and the kernel profiles' view of the array;
- report.py: text and JSON; recording.py: the exchange and the array as a recording.
"""
