"""What the kernel can take, for `ibpath resolve`: the running kernel's version against the
profiles' versions (kernelview.py), and the layout a profile is handed.

The seed asks for the kernel's capabilities in sysfs ("The kernel supported capabilities should
be viewable from a sysfs location"); no kernel has such a file, so the version decides, and
`--kernel` overrides it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..facts.kernelview import PROFILES, profiles_of, release_version

NO_CAPABILITY_FILE = ("no kernel exposes the capability file the seed asks for (a sysfs "
                      "location): the kernel's version decides, --kernel overrides it")
# the channel a resolver like rdma_getaddrinfo hands its array through: rdma_set_option
SET_OPTION_PROFILE = "ucma"

SINGLE, SEED, SEED_NATIVE = "single", "seed", "seed-native"
LAYOUTS = {
    SINGLE: "one GMP|PRIMARY|BIDIRECTIONAL (0x2b) record",
    SEED: "FORWARD_PRIMARY (0x0a), RETURN_PRIMARY (0x12), then GMP|PRIMARY|BIDIRECTIONAL "
          "(0x2b), which current kernels fall through to",
    SEED_NATIVE: "GMP_PRIMARY (0x03), FORWARD_PRIMARY (0x0a), RETURN_PRIMARY (0x12), for a "
                 "kernel that takes them standalone",
}


@dataclass(frozen=True)
class KernelTarget:
    """The profile the blob is built for and why: the running kernel's release, the profiles
    its version is one of, and whether --kernel chose."""

    profile: str
    release: str
    covered: tuple[str, ...]
    overridden: bool

    def why(self) -> str:
        ver = f"kernel {self.release}" if self.release else "kernel version unknown"
        # each profile with the releases and commits it stands for, so the line says why the
        # version picked it (ls-multi-6.1 vs ls-multi: ccae0447af0e, first in v6.3)
        got = ", ".join(PROFILES[p].label() for p in self.covered) or "none"
        if self.overridden:
            return f"--kernel {self.profile} ({ver}: profiles {got})"
        return (f"{ver}: profiles {got}; its rdma_set_option is {self.profile} "
                f"({PROFILES[self.profile].kernels})")

    def to_dict(self) -> dict:
        return {"profile": self.profile, "release": self.release,
                "profiles_of_release": list(self.covered), "overridden": self.overridden,
                "capability_file": None, "note": NO_CAPABILITY_FILE}


def running_release() -> str:
    return os.uname().release


def choose(override: str | None = None, release: str | None = None) -> KernelTarget:
    """The profile to build for: `override` when given, else what the running kernel's
    rdma_set_option takes (ucma on every kernel since 2.6.33)."""
    release = running_release() if release is None else release
    version = release_version(release)
    covered = tuple(profiles_of(version)) if version else ()
    if override:
        return KernelTarget(override, release, covered, True)
    return KernelTarget(SET_OPTION_PROFILE, release, covered, False)

