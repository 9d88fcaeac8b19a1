"""Developer tools of the checkout (not part of the package): the fuzzer (tools.fuzz), the
OpenSM recorder, install and test scripts. Tests import them as `from tools import fuzz`."""
