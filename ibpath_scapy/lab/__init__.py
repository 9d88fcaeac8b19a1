"""The kernel lab (issue 6): a stock Debian kernel under QEMU with soft-RoCE (rdma_rxe),
where the project's test program hands blobs to rdma_set_option and real captures are made.

guest.py builds and caches the guest, runner.py boots it, scenarios.py defines what runs,
export.py turns the guest's results into capture files; cmtest.py, guestrun.py and
guestinit.sh run inside the guest. Importing this package loads nothing heavy.
"""
