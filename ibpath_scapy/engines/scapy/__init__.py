"""engines/scapy"""
