"""Remote clients: backends whose work happens on a broker process (gRPC, SSH)."""
