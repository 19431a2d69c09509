"""Generated code for the opsbroker wire contract (see ``proto/opsbroker/v1/broker.proto``)."""
