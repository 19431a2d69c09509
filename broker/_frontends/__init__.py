"""Front-ends: translations between a wire protocol and an ``operations.Backend`` (the core)."""
