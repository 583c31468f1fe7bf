"""DCL attributor: a text encoder, attention pooling over turns, agent and mode prototype banks."""
