"""Trainers of failure attributors: SFT and GRPO on TRL, and their shared command-line plumbing."""
