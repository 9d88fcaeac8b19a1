#!/bin/sh
# /init of the ibpath lab guest (the initramfs is the whole root file system).
# The host appends this file, the project source and scenarios.json to the cached base
# initramfs; guestrun.py does the work and writes its results as a tar stream onto /dev/vda.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "ibpath-lab: guest up, kernel $(uname -r)"
# The host copied only the modules the lab needs; their dependency index is built here.
depmod -a
modprobe virtio_pci
modprobe virtio_blk
for i in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/vda ] && break; sleep 0.2; done
python3 /lab/ibpath_scapy/lab/guestrun.py /lab/scenarios.json /tmp/out /dev/vda
echo "ibpath-lab: guestrun exit $?"
sync
echo b > /proc/sysrq-trigger
