"""Capture: the probe and the adapter contract, the spans a run is made of (GenAI semantic
conventions), the one LLM-call seam (interception) and how content is encoded on spans."""
