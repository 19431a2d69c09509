"""Remote clients of the broker (gRPC, SSH): each implements every ``operations`` protocol."""
