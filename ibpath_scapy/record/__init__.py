"""Recording real management traffic from real software.

``ibpath_scapy.record.process`` runs any program under the LD_PRELOAD recorder
``ibpathrec.c`` (`ibpath record -o OUT.pcapng -- CMD`): its ucma commands, umad MADs, ACM
messages and NETLINK_RDMA messages go to a spool (``spool.py``), which ``capture.py`` turns
into one pcapng. ``ibpath_scapy.record.netlink`` traces netlink with strace instead.

``ibpath_scapy.record.fabric`` runs a simulated fabric in user space (ibsim, OpenSM as SM and
SA, programs through libumad2sim.so); ``ibpath_scapy.record.opensm`` records OpenSM and
``saquery`` on it with `ibpath record` and turns OpenSM's side of the SA exchange into a
native-InfiniBand capture (ERF type 21 records, pcap link type 197) the way ibdump would have
seen it on the wire.
"""
